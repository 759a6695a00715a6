package host

import (
	"net/http"
	"sync"
	"time"

	"github.com/chimehq/chime/hostapi"
)

// maxUsedMarkers bounds the memory of accepted followup markers. Only the
// host signs markers, one per followup sent, and each is remembered for
// minutes, so the bound is far above any real rate; at it, new markers
// are refused (a followup then fails visibly) rather than memory growing.
const maxUsedMarkers = 200_000

// markerLedger remembers the followup markers accepted until they expire,
// so each is accepted once (docs/failures.md).
type markerLedger struct {
	mu        sync.Mutex
	used      map[string]int64 // marker → unix seconds after which it is invalid anyway
	nextSweep int64            // unix seconds
}

// accept records marker, valid until until, and reports whether it was
// new. Expired entries are dropped on the way.
func (l *markerLedger) accept(marker string, now, until time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.used == nil {
		l.used = map[string]int64{}
	}
	if _, ok := l.used[marker]; ok {
		return false
	}
	// Sweep expired entries at most once a minute: O(1) amortized.
	if now.Unix() >= l.nextSweep {
		l.nextSweep = now.Unix() + 60
		for m, exp := range l.used {
			if now.Unix() > exp {
				delete(l.used, m)
			}
		}
	}
	if len(l.used) >= maxUsedMarkers {
		return false
	}
	l.used[marker] = until.Unix()
	return true
}

// AcceptFollowup checks a followup marker (MAC and expiry) and accepts it
// the first time only: a captured marker cannot be replayed to skip the
// filter (docs/failures.md).
func (s *Service) AcceptFollowup(marker string) bool {
	now := s.now()
	if _, ok := hostapi.VerifyFollowupMarker(s.cfg.Token, marker, now); !ok {
		return false
	}
	// Remembered past its expiry by a minute, for clocks a little apart.
	return s.markers.accept(marker, now, now.Add(hostapi.FollowupMarkerTTL+2*time.Minute))
}

func (s *Service) handleFollowup(w http.ResponseWriter, r *http.Request) {
	var req hostapi.FollowupRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if !s.AcceptFollowup(req.Marker) {
		s.metrics.FollowupMarkersRefused.Inc()
		s.log.Info("followup marker refused: invalid, expired or already used")
		writeError(w, http.StatusForbidden, "followup marker invalid, expired or already used")
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
