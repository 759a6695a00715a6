package ntp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sntp "github.com/beevik/ntp"
	"github.com/jonboulle/clockwork"

	"github.com/chimehq/chime/storage"
)

// fakeServer is a minimal SNTP server on 127.0.0.1 that answers real NTPv4
// packets according to its mode.
type fakeServer struct {
	conn    *net.UDPConn
	offset  time.Duration
	mode    atomic.Int32
	packets atomic.Int32
}

const (
	modeGood   = iota
	modeKoD    // stratum 0, kiss code RATE
	modeNoSync // leap indicator 3: server clock not synchronized
	modeSilent // no answer at all
)

func newFakeServer(t *testing.T, offset time.Duration) *fakeServer {
	t.Helper()
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeServer{conn: conn, offset: offset}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 512)
		for {
			n, addr, err := conn.ReadFromUDP(buf)
			if err != nil {
				return
			}
			f.packets.Add(1)
			if n < 48 || f.mode.Load() == modeSilent {
				continue
			}
			_, _ = conn.WriteToUDP(f.reply(buf[:n]), addr)
		}
	}()
	t.Cleanup(func() { conn.Close(); <-done })
	return f
}

func (f *fakeServer) addr() string { return f.conn.LocalAddr().String() }

func ntpStamp(t time.Time) uint64 {
	const unixToNTP = 2208988800
	secs := uint64(t.Unix() + unixToNTP)
	frac := uint64(t.Nanosecond()) << 32 / 1e9
	return secs<<32 | frac
}

func (f *fakeServer) reply(req []byte) []byte {
	now := time.Now().Add(f.offset)
	leap, stratum := byte(0), byte(2)
	refID := []byte("GOOG")
	switch f.mode.Load() {
	case modeKoD:
		stratum, refID = 0, []byte("RATE")
	case modeNoSync:
		leap = 3
	}
	out := make([]byte, 48)
	out[0] = leap<<6 | 4<<3 | 4 // LI, version 4, mode server
	out[1] = stratum
	out[2] = 6
	out[3] = 0xEC                                   // precision 2^-20
	binary.BigEndian.PutUint32(out[4:], 0x00000100) // root delay ≈ 4 ms
	binary.BigEndian.PutUint32(out[8:], 0x00000100) // root dispersion
	copy(out[12:16], refID)
	binary.BigEndian.PutUint64(out[16:], ntpStamp(now.Add(-10*time.Second)))
	copy(out[24:32], req[40:48]) // origin = client's transmit
	binary.BigEndian.PutUint64(out[32:], ntpStamp(now))
	binary.BigEndian.PutUint64(out[40:], ntpStamp(now))
	return out
}

// memPersister records saves.
type memPersister struct {
	mu    sync.Mutex
	state storage.NTPState
	has   bool
	saves int
	loads int
}

func (m *memPersister) LoadNTP() (storage.NTPState, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.loads++
	return m.state, m.has, nil
}

func (m *memPersister) SaveNTP(s storage.NTPState) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.state, m.has = s, true
	m.saves++
	return nil
}

func (m *memPersister) snapshot() (storage.NTPState, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state, m.saves
}

func near(got, want, tol int64) bool { return got >= want-tol && got <= want+tol }

func TestStatusTransitions(t *testing.T) {
	t.Parallel()
	srv := newFakeServer(t, 1500*time.Millisecond)
	wall := clockwork.NewFakeClock() // the tracker's wall clock, moved by hand
	store := &memPersister{}
	cfg := Config{Enabled: true, Servers: []string{srv.addr()}, StaleAfter: time.Hour, Timeout: 300 * time.Millisecond}
	tr, err := New(cfg, store, WithClock(wall))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	if s := tr.Snapshot(); s.Status != StatusError || s.Err != errNotSynced {
		t.Fatalf("before any sync: %+v", s)
	}

	// 1. A good answer: ok, with the server's offset.
	if err := tr.SyncOnce(ctx); err != nil {
		t.Fatal(err)
	}
	s := tr.Snapshot()
	if s.Status != StatusOK || !near(s.OffsetMs, 1500, 100) || s.Server != srv.addr() || s.Err != "" {
		t.Fatalf("after good sync: %+v", s)
	}
	if d := tr.Now().Sub(wall.Now()); !near(d.Milliseconds(), 1500, 100) {
		t.Fatalf("Now is off by %v, want ≈1.5s", d)
	}
	good := s
	if st, n := store.snapshot(); n != 1 || st.Status != "ok" || st.OffsetMs != good.OffsetMs || st.UpdatedAt != good.UpdatedAt.UnixMilli() {
		t.Fatalf("persisted %+v after %d saves", st, n)
	}

	// 2. Kiss-of-death: rejected by Validate, offset kept, status error.
	srv.mode.Store(modeKoD)
	err = tr.SyncOnce(ctx)
	if err == nil || !strings.Contains(err.Error(), sntp.ErrKissOfDeath.Error()) {
		t.Fatalf("KoD: %v", err)
	}
	s = tr.Snapshot()
	if s.Status != StatusError || s.OffsetMs != good.OffsetMs || !s.UpdatedAt.Equal(good.UpdatedAt) || s.Err == "" {
		t.Fatalf("after KoD: %+v", s)
	}

	// 3. Leap indicator "not in sync": rejected the same way.
	srv.mode.Store(modeNoSync)
	err = tr.SyncOnce(ctx)
	if err == nil || !strings.Contains(err.Error(), sntp.ErrInvalidLeapSecond.Error()) {
		t.Fatalf("unsynchronized server: %v", err)
	}
	if s = tr.Snapshot(); s.Status != StatusError || s.OffsetMs != good.OffsetMs {
		t.Fatalf("after leap=3: %+v", s)
	}

	// 4. Silence: a timeout, offset still kept.
	srv.mode.Store(modeSilent)
	if err := tr.SyncOnce(ctx); err == nil {
		t.Fatal("silent server: no error")
	}
	if s = tr.Snapshot(); s.Status != StatusError || s.OffsetMs != good.OffsetMs {
		t.Fatalf("after silence: %+v", s)
	}
	if st, _ := store.snapshot(); st.Status != "error" || st.Error == "" || st.OffsetMs != good.OffsetMs {
		t.Fatalf("failure not persisted: %+v", st)
	}

	// 5. Past StaleAfter the old offset is stale (and still applied).
	wall.Advance(2 * time.Hour)
	if s = tr.Snapshot(); s.Status != StatusStale || s.OffsetMs != good.OffsetMs {
		t.Fatalf("after StaleAfter: %+v", s)
	}
	if d := tr.Now().Sub(wall.Now()); !near(d.Milliseconds(), good.OffsetMs, 1) {
		t.Fatalf("stale offset not applied: %v", d)
	}

	// 6. Recovery.
	srv.mode.Store(modeGood)
	if err := tr.SyncOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if s = tr.Snapshot(); s.Status != StatusOK || s.Err != "" {
		t.Fatalf("after recovery: %+v", s)
	}
}

// With a fresh last-good offset and no attempt since, the status is ok; a
// last good older than StaleAfter is stale even without a failure.
func TestStaleWithoutFailure(t *testing.T) {
	t.Parallel()
	srv := newFakeServer(t, 0)
	wall := clockwork.NewFakeClock()
	tr, err := New(Config{Enabled: true, Servers: []string{srv.addr()}, StaleAfter: time.Minute}, nil, WithClock(wall))
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.SyncOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := tr.Snapshot(); s.Status != StatusOK {
		t.Fatalf("%+v", s)
	}
	wall.Advance(61 * time.Second)
	if s := tr.Snapshot(); s.Status != StatusStale || s.Err != "" {
		t.Fatalf("%+v", s)
	}
}

func TestStartIsAsyncAndFailsOver(t *testing.T) {
	t.Parallel()
	dead := newFakeServer(t, 0)
	dead.mode.Store(modeSilent)
	good := newFakeServer(t, -2*time.Second)
	store := &memPersister{}
	tr, err := New(Config{Enabled: true, Servers: []string{dead.addr(), good.addr()}, Timeout: 500 * time.Millisecond, Interval: time.Hour}, store)
	if err != nil {
		t.Fatal(err)
	}
	synced := make(chan struct{}, 4)
	tr.onSync = func() { synced <- struct{}{} }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	start := time.Now()
	tr.Start(ctx)
	tr.Start(ctx) // second call is a no-op
	if s := tr.Snapshot(); s.Status != StatusError || s.Err != errNotSynced {
		// The dead server holds the first sync for its 500 ms timeout.
		t.Fatalf("Start blocked or synced early (%v): %+v", time.Since(start), s)
	}
	select {
	case <-synced:
	case <-time.After(10 * time.Second):
		t.Fatal("first sync never finished")
	}
	s := tr.Snapshot()
	if s.Status != StatusOK || s.Server != good.addr() || !near(s.OffsetMs, -2000, 100) {
		t.Fatalf("after failover: %+v", s)
	}
	if dead.packets.Load() == 0 {
		t.Fatal("first server was not tried first")
	}
	if store.loads != 1 {
		t.Fatalf("state not restored on start (loads=%d)", store.loads)
	}
}

// The sync loop waits on the injected clock: Retry after a failure, then
// Interval after a success; Clock is host time over the same waits.
func TestLoopWaitsOnTheClock(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 2, 2, 21, 0, 0, 0, time.UTC)
	fake := clockwork.NewFakeClockAt(t0)
	tr, err := New(Config{Enabled: true, Servers: []string{"127.0.0.1:123"}, Interval: time.Hour, Retry: time.Minute}, nil, WithClock(fake))
	if err != nil {
		t.Fatal(err)
	}
	var queries atomic.Int32
	tr.query = func(string, time.Duration) (*sntp.Response, error) {
		if queries.Add(1) == 1 {
			return nil, errors.New("unreachable")
		}
		return &sntp.Response{Version: 4, Stratum: 2, Time: t0, ReferenceTime: t0.Add(-10 * time.Second), ClockOffset: 250 * time.Millisecond}, nil
	}
	synced := make(chan struct{}, 4)
	tr.onSync = func() { synced <- struct{}{} }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tr.Start(ctx)

	step := func(d time.Duration, wantQueries int32) {
		t.Helper()
		bctx, stop := context.WithTimeout(ctx, 5*time.Second)
		defer stop()
		if err := fake.BlockUntilContext(bctx, 1); err != nil {
			t.Fatalf("the loop is not waiting on the clock: %v", err)
		}
		if n := queries.Load(); n != wantQueries-1 {
			t.Fatalf("%d queries before advancing, want %d", n, wantQueries-1)
		}
		fake.Advance(d)
		<-synced
		if n := queries.Load(); n != wantQueries {
			t.Fatalf("%d queries after %v, want %d", n, d, wantQueries)
		}
	}
	<-synced // the first sync failed
	step(time.Minute, 2)
	host := tr.Clock()
	if d := host.Now().Sub(fake.Now()); d != 250*time.Millisecond {
		t.Fatalf("host clock offset %v", d)
	}
	step(time.Hour, 3)
}

func TestRestoreFromStore(t *testing.T) {
	t.Parallel()
	st, err := storage.Open("", storage.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now()
	if err := st.SaveNTP(storage.NTPState{Status: "ok", OffsetMs: 777, Server: "x:123", UpdatedAt: now.Add(-time.Hour).UnixMilli()}); err != nil {
		t.Fatal(err)
	}
	srv := newFakeServer(t, 0)
	srv.mode.Store(modeSilent)
	var _ Persister = st // the store satisfies the interface
	tr, err := New(Config{Enabled: true, Servers: []string{srv.addr()}, Timeout: 5 * time.Second}, st)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tr.Start(ctx) // the first sync hangs on the silent server; restore is synchronous
	s := tr.Snapshot()
	if s.Status != StatusOK || s.OffsetMs != 777 || s.Server != "x:123" {
		t.Fatalf("restored: %+v", s)
	}
	if d := tr.Now().Sub(now); d < 777*time.Millisecond {
		t.Fatalf("restored offset not applied: %v", d)
	}

	// Restored but old: stale.
	if err := st.SaveNTP(storage.NTPState{Status: "ok", OffsetMs: 5, UpdatedAt: now.Add(-7 * time.Hour).UnixMilli()}); err != nil {
		t.Fatal(err)
	}
	tr2, _ := New(Config{Enabled: true, Servers: []string{srv.addr()}, Timeout: 5 * time.Second}, st)
	tr2.Start(ctx)
	if s := tr2.Snapshot(); s.Status != StatusStale || s.OffsetMs != 5 {
		t.Fatalf("old restored state: %+v", s)
	}
}

func TestDisabledNeverTouchesNetwork(t *testing.T) {
	t.Parallel()
	srv := newFakeServer(t, time.Hour)
	store := &memPersister{has: true, state: storage.NTPState{Status: "ok", OffsetMs: 9999, UpdatedAt: time.Now().UnixMilli()}}
	tr, err := New(Config{Enabled: false, Servers: []string{srv.addr()}}, store)
	if err != nil {
		t.Fatal(err)
	}
	var queries atomic.Int32
	tr.query = func(string, time.Duration) (*sntp.Response, error) {
		queries.Add(1)
		return nil, errors.New("must not be called")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tr.Start(ctx)
	if err := tr.SyncOnce(ctx); !errors.Is(err, ErrDisabled) {
		t.Fatalf("SyncOnce on disabled tracker: %v", err)
	}
	if s := tr.Snapshot(); s != (State{Status: StatusDisabled}) {
		t.Fatalf("snapshot: %+v", s)
	}
	if d := time.Since(tr.Now()); d < -time.Second || d > time.Second {
		t.Fatalf("disabled Now is not the wall clock: %v", d)
	}
	if queries.Load() != 0 || srv.packets.Load() != 0 || store.saves != 0 || store.loads != 0 {
		t.Fatalf("disabled tracker touched something: queries=%d packets=%d saves=%d loads=%d",
			queries.Load(), srv.packets.Load(), store.saves, store.loads)
	}
}

func TestCanceledSyncRecordsNothing(t *testing.T) {
	t.Parallel()
	srv := newFakeServer(t, 0)
	store := &memPersister{}
	tr, err := New(Config{Enabled: true, Servers: []string{srv.addr()}}, store)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := tr.SyncOnce(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled sync: %v", err)
	}
	if s := tr.Snapshot(); s.Err != errNotSynced || store.saves != 0 || srv.packets.Load() != 0 {
		t.Fatalf("canceled sync left traces: %+v saves=%d", s, store.saves)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	if _, err := New(Config{Enabled: true}, nil); err == nil {
		t.Fatal("no servers accepted")
	}
	if _, err := New(Config{Enabled: true, Servers: []string{"host:99999"}}, nil); err == nil {
		t.Fatal("bad port accepted")
	}
	if _, err := New(Config{Enabled: false}, nil); err != nil {
		t.Fatalf("disabled config needs no servers: %v", err)
	}
}

func TestConfigFromEnv(t *testing.T) {
	t.Parallel()
	env := func(kv map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := kv[k]; return v, ok }
	}
	cfg, err := configFromLookup(env(nil))
	if err != nil || !cfg.Enabled || strings.Join(cfg.Servers, ",") != "time.google.com,time.cloudflare.com,pool.ntp.org" || cfg.StaleAfter != 6*time.Hour {
		t.Fatalf("defaults: %+v %v", cfg, err)
	}
	for _, off := range []string{"0", "false", "OFF", " no "} {
		cfg, err := configFromLookup(env(map[string]string{"CHIME_NTP": off}))
		if err != nil || cfg.Enabled {
			t.Fatalf("CHIME_NTP=%q: %+v %v", off, cfg, err)
		}
	}
	cfg, err = configFromLookup(env(map[string]string{
		"CHIME_NTP": "on", "CHIME_NTP_SERVERS": " 127.0.0.1:1234 , ,ntp.example, [::1]:123,[::1]", "CHIME_NTP_STALE_AFTER": "90m",
	}))
	if err != nil || !cfg.Enabled || strings.Join(cfg.Servers, "|") != "127.0.0.1:1234|ntp.example|[::1]:123|[::1]" || cfg.StaleAfter != 90*time.Minute {
		t.Fatalf("overrides: %+v %v", cfg, err)
	}
	bad := []map[string]string{
		{"CHIME_NTP": "maybe"},
		{"CHIME_NTP_SERVERS": ",,"},
		{"CHIME_NTP_SERVERS": "host:0"},
		{"CHIME_NTP_SERVERS": "host:abc"},
		{"CHIME_NTP_SERVERS": "a b"},
		{"CHIME_NTP_STALE_AFTER": "6 hours"},
		{"CHIME_NTP_STALE_AFTER": "-1h"},
	}
	for _, kv := range bad {
		if _, err := configFromLookup(env(kv)); err == nil {
			t.Fatalf("%v accepted", kv)
		} else {
			for k := range kv {
				if !strings.Contains(err.Error(), k) {
					t.Fatalf("error %q does not name %s", err, k)
				}
			}
		}
	}
}

func FuzzParseServers(f *testing.F) {
	for _, s := range []string{"time.google.com", "a:1,b:2", "[::1]:123", "::1", ",", "h:65536", "[x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, list string) {
		servers, err := ParseServers(list)
		if err != nil {
			return
		}
		if len(servers) == 0 {
			t.Fatal("no error and no servers")
		}
		for _, s := range servers {
			if s == "" || strings.Contains(s, ",") || strings.TrimSpace(s) != s {
				t.Fatalf("bad entry %q from %q", s, list)
			}
		}
	})
}

// A machine without network must not fill the log: the first failed sync
// is one info line, repeats are debug, and recovery is one info line.
func TestSyncFailureLogsOnce(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	tr, err := New(Config{Enabled: true, Servers: []string{"a:123", "b:123", "c:123"}}, nil, WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	fail := true
	tr.query = func(server string, _ time.Duration) (*sntp.Response, error) {
		if fail {
			return nil, errors.New("lookup " + server + ": no such host")
		}
		now := time.Now()
		return &sntp.Response{Version: 4, Stratum: 2, Time: now, ReferenceTime: now.Add(-time.Second), ClockOffset: time.Millisecond}, nil
	}
	for range 3 {
		if err := tr.SyncOnce(context.Background()); err == nil {
			t.Fatal("sync succeeded against failing servers")
		}
	}
	fail = false
	if err := tr.SyncOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if n := strings.Count(out, "\n"); n != 2 || strings.Contains(out, "WARN") || strings.Contains(out, "no such host") ||
		!strings.Contains(out, "no server answered") || !strings.Contains(out, "synced again") {
		t.Fatalf("log:\n%s", out)
	}
}
