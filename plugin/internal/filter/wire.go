package filter

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"github.com/chimehq/chime/hostapi"
)

// The per-request host calls (prepare, its answer, outcomes; docs/architecture.md) are
// encoded and decoded by hand: encoding/json's reflection is slow in Go's
// wasm code. Each fast path handles only input whose result it knows to be
// exactly encoding/json's and hands everything else to encoding/json, so
// the wire format and the decoded values are unchanged.

// encodePrepare is json.Marshal(prep), byte for byte.
func encodePrepare(prep hostapi.PrepareRequest) ([]byte, error) {
	b := make([]byte, 0, 128)
	b = append(b, `{"requestId":`...)
	b = appendJSONString(b, prep.RequestID)
	b = append(b, `,"protocol":`...)
	b = appendJSONString(b, prep.Protocol)
	if prep.SessionID != "" {
		b = append(b, `,"sessionId":`...)
		b = appendJSONString(b, prep.SessionID)
	}
	if prep.Timezone != "" {
		b = append(b, `,"timezone":`...)
		b = appendJSONString(b, prep.Timezone)
	}
	if len(prep.Directives) > 0 {
		dirs, err := json.Marshal(prep.Directives) // rare; the slow path is fine
		if err != nil {
			return nil, err
		}
		b = append(b, `,"directives":`...)
		b = append(b, dirs...)
	}
	if prep.PreviousResponseID != "" {
		b = append(b, `,"previousResponseId":`...)
		b = appendJSONString(b, prep.PreviousResponseID)
	}
	if prep.DeadlineMs != 0 {
		b = append(b, `,"deadlineMs":`...)
		b = strconv.AppendInt(b, prep.DeadlineMs, 10)
	}
	if len(prep.Kept) > 0 {
		kept, err := json.Marshal(prep.Kept) // only after a host outage
		if err != nil {
			return nil, err
		}
		b = append(b, `,"kept":`...)
		b = append(b, kept...)
	}
	return append(b, '}'), nil
}

// encodeOutcome is json.Marshal(hostapi.OutcomeRequest{RequestID: id}).
func encodeOutcome(requestID string) []byte {
	b := append(make([]byte, 0, 32+len(requestID)), `{"requestId":`...)
	b = appendJSONString(b, requestID)
	return append(b, '}')
}

// appendJSONString appends s quoted as encoding/json quotes it. Plain
// printable ASCII is copied; anything json.Marshal would escape (quotes,
// control characters, <, >, &, non-ASCII that may be invalid UTF-8 or
// U+2028/9) goes through json.Marshal.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always marshals
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// decodePrepareAnswer is json.Unmarshal(body, ans) for the host's prepare
// answer (hostapi.PrepareResponse).
func decodePrepareAnswer(body []byte, ans *hostapi.PrepareResponse) error {
	fast := *ans
	if (&answerScanner{b: body}).prepare(&fast) {
		*ans = fast
		return nil
	}
	return json.Unmarshal(body, ans)
}

// answerScanner is a strict reader for the few shapes the host sends. Every
// method reports false on anything it does not handle (escapes, null, a
// float, an unknown key, a key in another case, invalid UTF-8...), and the
// caller then falls back to encoding/json; what it accepts is valid JSON.
type answerScanner struct {
	b []byte
	i int
}

func (s *answerScanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// eat consumes c after optional whitespace.
func (s *answerScanner) eat(c byte) bool {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// str reads a string without escapes or control characters, valid UTF-8:
// exactly the strings encoding/json returns byte for byte.
func (s *answerScanner) str() (string, bool) {
	if !s.eat('"') {
		return "", false
	}
	start, ascii := s.i, true
	for ; s.i < len(s.b); s.i++ {
		c := s.b[s.i]
		switch {
		case c == '"':
			raw := s.b[start:s.i]
			s.i++
			if !ascii && !utf8.Valid(raw) {
				return "", false
			}
			return string(raw), true
		case c == '\\' || c < 0x20:
			return "", false
		case c >= 0x80:
			ascii = false
		}
	}
	return "", false
}

// int64 reads an integer literal that strconv.ParseInt accepts in full.
func (s *answerScanner) int64() (int64, bool) {
	s.ws()
	start := s.i
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	digits := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	n := s.i - digits
	if n == 0 || (n > 1 && s.b[digits] == '0') {
		return 0, false
	}
	if s.i < len(s.b) && (s.b[s.i] == '.' || s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		return 0, false
	}
	v, err := strconv.ParseInt(string(s.b[start:s.i]), 10, 64)
	return v, err == nil
}

func (s *answerScanner) bool() (bool, bool) {
	s.ws()
	switch {
	case len(s.b)-s.i >= 4 && string(s.b[s.i:s.i+4]) == "true":
		s.i += 4
		return true, s.delimited()
	case len(s.b)-s.i >= 5 && string(s.b[s.i:s.i+5]) == "false":
		s.i += 5
		return false, s.delimited()
	}
	return false, false
}

// delimited reports whether a literal ends here (not e.g. "truex").
func (s *answerScanner) delimited() bool {
	if s.i == len(s.b) {
		return true
	}
	switch s.b[s.i] {
	case ' ', '\t', '\n', '\r', ',', '}', ']':
		return true
	}
	return false
}

// object reads {"key": value, ...}, calling member for each key.
func (s *answerScanner) object(member func(key string) bool) bool {
	if !s.eat('{') {
		return false
	}
	if s.eat('}') {
		return true
	}
	for {
		key, ok := s.str()
		if !ok || !s.eat(':') || !member(key) {
			return false
		}
		if s.eat('}') {
			return true
		}
		if !s.eat(',') {
			return false
		}
	}
}

func (s *answerScanner) strings() ([]string, bool) {
	if !s.eat('[') {
		return nil, false
	}
	out := []string{} // encoding/json makes [] an empty, non-nil slice
	if s.eat(']') {
		return out, true
	}
	for {
		v, ok := s.str()
		if !ok {
			return nil, false
		}
		out = append(out, v)
		if s.eat(']') {
			return out, true
		}
		if !s.eat(',') {
			return nil, false
		}
	}
}

// end reports whether only whitespace is left.
func (s *answerScanner) end() bool {
	s.ws()
	return s.i == len(s.b)
}

func (s *answerScanner) prepare(ans *hostapi.PrepareResponse) bool {
	ok := s.object(func(key string) bool {
		var ok bool
		switch key {
		case "nowMs":
			ans.NowMs, ok = s.int64()
		case "ntp":
			ok = s.ntp(&ans.NTP)
		case "tools":
			ans.Tools, ok = s.strings()
		case "reminders":
			ans.Reminders, ok = s.str()
		case "reserved":
			ans.Reserved, ok = s.bool()
		case "mayContinue":
			ans.MayContinue, ok = s.bool()
		case "route":
			ans.Route, ok = s.str()
		case "template":
			ans.Template, ok = s.bool()
		case "generation":
			ans.Generation, ok = s.int64()
		case "quietMs":
			ans.QuietMs, ok = s.int64()
		}
		return ok
	})
	return ok && s.end()
}

func (s *answerScanner) ntp(n *hostapi.NTPInfo) bool {
	return s.object(func(key string) bool {
		var ok bool
		switch key {
		case "status":
			n.Status, ok = s.str()
		case "offsetMs":
			n.OffsetMs, ok = s.int64()
		case "server":
			n.Server, ok = s.str()
		case "updatedAt":
			n.UpdatedAt, ok = s.int64()
		}
		return ok
	})
}
