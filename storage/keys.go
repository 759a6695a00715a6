package storage

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
)

// MaxIDLen is the longest id kept verbatim in a key; longer ids are hashed.
const MaxIDLen = 128

// hashedPrefix marks a hashed id. It is outside the verbatim charset, so a
// hashed id can never equal a verbatim one.
const hashedPrefix = "~"

// ErrEmptyID is returned for an empty session, task or request id.
var ErrEmptyID = errors.New("storage: empty id")

// SanitizeSessionID maps a session id to the form used inside keys (docs/protocols.md#session-identity).
// Ids made only of [A-Za-z0-9._-] and at most MaxIDLen bytes are kept as they
// are; anything else becomes "~" + 40 hex digits of its SHA-256. The mapping
// is injective in practice, and its output never contains "/".
func SanitizeSessionID(id string) (string, error) {
	return sanitizeID(id)
}

func sanitizeID(id string) (string, error) {
	if id == "" {
		return "", ErrEmptyID
	}
	if len(id) <= MaxIDLen && verbatimOK(id) {
		return id, nil
	}
	sum := sha256.Sum256([]byte(id))
	return hashedPrefix + hex.EncodeToString(sum[:20]), nil
}

func verbatimOK(id string) bool {
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9',
			c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// ValidTaskID reports whether id can be a task id: 1..64 bytes of
// [A-Za-z0-9._-]. Task ids come back from the model, so they are checked
// rather than hashed: an unknown id must read as unknown.
func ValidTaskID(id string) bool {
	return id != "" && len(id) <= 64 && verbatimOK(id)
}

const (
	keyVersion     = "v1/"
	sessionPrefix  = keyVersion + "s/"
	reservePrefix  = keyVersion + "resv/"
	ntpKey         = keyVersion + "ntp"
	metaSuffix     = "meta"
	taskSegment    = "task/"
	timerSegment   = "timer/"
	stopSuffix     = "stop"
	dirsSuffix     = "directives"
	sessionKeySep  = "/"
	errBadTaskID   = "storage: invalid task id"
	errBadRecordID = "storage: record without session id"
)

func sessionRoot(sid string) string { return sessionPrefix + sid + sessionKeySep }

func metaKey(sid string) []byte { return []byte(sessionRoot(sid) + metaSuffix) }

func taskPrefix(sid string) []byte { return []byte(sessionRoot(sid) + taskSegment) }

func taskKey(sid, taskID string) []byte { return []byte(sessionRoot(sid) + taskSegment + taskID) }

func timerPrefix(sid string) []byte { return []byte(sessionRoot(sid) + timerSegment) }

func timerKey(sid, id string) []byte { return []byte(sessionRoot(sid) + timerSegment + id) }

// isTimerKey reports whether k is v1/s/<sid>/timer/<id>.
func isTimerKey(k []byte) bool {
	rest, ok := strings.CutPrefix(string(k), sessionPrefix)
	if !ok {
		return false
	}
	i := strings.IndexByte(rest, '/')
	return i > 0 && strings.HasPrefix(rest[i+1:], timerSegment)
}

func stopKey(sid string) []byte { return []byte(sessionRoot(sid) + stopSuffix) }

func directivesKey(sid string) []byte { return []byte(sessionRoot(sid) + dirsSuffix) }

func reservationKey(rid string) []byte { return []byte(reservePrefix + rid) }

// isTaskKey reports whether k is v1/s/<sid>/task/<id>.
func isTaskKey(k []byte) bool {
	rest, ok := strings.CutPrefix(string(k), sessionPrefix)
	if !ok {
		return false
	}
	i := strings.IndexByte(rest, '/')
	return i > 0 && strings.HasPrefix(rest[i+1:], taskSegment)
}

// isMetaKey reports whether k is v1/s/<sid>/meta.
func isMetaKey(k []byte) bool {
	rest, ok := strings.CutPrefix(string(k), sessionPrefix)
	if !ok {
		return false
	}
	i := strings.IndexByte(rest, '/')
	return i > 0 && rest[i+1:] == metaSuffix
}
