package llm

import (
	"bytes"

	"github.com/chimehq/chime/llm/internal/reqscan"
)

// Messages' message_start and message_delta: every answer has one of
// each, carrying its id, model, stop reason and usage. Read by gjson
// (validate, then a lookup per field from the start) they cost the wasm
// guest about 6 µs each, a tenth of a short streamed answer's time.
const (
	messageStartHead = `{"type":"message_start","message":{`
	messageDeltaHead = `{"type":"message_delta",`
)

// messagesEnvelope is messagesFixed for message_start and message_delta:
// the data validated once, then the few fields general reads found in one
// walk per object. It refuses (false, ev and s untouched) whatever gjson
// could read otherwise: a key written with an escape (gjson unescapes keys
// before comparing), a key it reads appearing twice, a number other than
// a small non-negative integer, an id or model that is not a string.
func (s *classifyState) messagesEnvelope(ev *Event) bool {
	d := ev.Data
	if !reqscan.Valid(d) {
		return false
	}
	var top [4]span // index, message, delta, usage
	if !envelopeMembers(d, 0, top[:], "index", "message", "delta", "usage") {
		return false
	}
	index, ok := envelopeInt(d, top[0])
	if !ok {
		return false
	}
	var e Event // what general sets, applied only once all is read
	var usage span
	start := bytes.HasPrefix(d, []byte(messageStartHead))
	if start {
		var msg [3]span // id, model, usage
		if !envelopeMembers(d, top[1].s, msg[:], "id", "model", "usage") {
			return false
		}
		id, ok1 := envelopeString(d, msg[0])
		model, ok2 := envelopeString(d, msg[1])
		if !ok1 || !ok2 {
			return false
		}
		e.Type, e.ID, e.Model, usage = "message_start", id, model, msg[2]
	} else {
		e.Type, usage = "message_delta", top[3]
		if delta := top[2]; delta.ok() {
			if d[delta.s] != '{' {
				return false
			}
			var sr [1]span
			if !envelopeMembers(d, delta.s, sr[:], "stop_reason") {
				return false
			}
			if sr[0].ok() && d[sr[0].s] == '"' {
				raw := literalText(d[sr[0].s:sr[0].e])
				e.Kind |= KindFinish
				e.Finish = Finish{Reason: classifyFinish(Messages, raw), Raw: raw}
			}
		}
	}
	in, out := -1, -1
	if usage.ok() && d[usage.s] == '{' {
		var u [2]span
		if !envelopeMembers(d, usage.s, u[:], "input_tokens", "output_tokens") {
			return false
		}
		var ok1, ok2 bool
		in, ok1 = envelopeInt(d, u[0])
		out, ok2 = envelopeInt(d, u[1])
		if !ok1 || !ok2 {
			return false
		}
	} else {
		usage = noSpan
	}
	// Read through: now as general would.
	ev.Type = e.Type
	if top[0].ok() && index >= 0 {
		ev.Index = index
	}
	if start && !s.started {
		s.started = true
		ev.Kind |= KindStart
		ev.ID, ev.Model = e.ID, e.Model
	}
	ev.Kind |= e.Kind
	if e.Kind.Has(KindFinish) {
		ev.Finish = e.Finish
	}
	if usage.ok() {
		s.setUsage(ev, in, out)
	}
	return true
}

// envelopeMembers sets out[k] to the value of the member names[k] of the
// object at d[i] (d valid JSON), noSpan when absent. It reports false
// when one of them appears twice or any key holds an escape.
func envelopeMembers(d []byte, i int, out []span, names ...string) bool {
	for k := range out {
		out[k] = noSpan
	}
	ok := true
	end := reqscan.Members(d, i, func(key []byte, vs, ve int) bool {
		if bytes.IndexByte(key, '\\') >= 0 {
			ok = false
			return false
		}
		for k, n := range names {
			if string(key) == n {
				if out[k].ok() {
					ok = false
					return false
				}
				out[k] = span{vs, ve}
			}
		}
		return true
	})
	return ok && end >= 0
}

// envelopeInt is intOr(v, -1) for the value at sp: -1 when absent or not
// a number; ok false for a number other than a small non-negative integer.
func envelopeInt(d []byte, sp span) (n int, ok bool) {
	if !sp.ok() {
		return -1, true
	}
	if c := d[sp.s]; c != '-' && (c < '0' || c > '9') {
		return -1, true
	}
	n, j, ok := smallIndex(d[:sp.e], sp.s)
	return n, ok && j == sp.e
}

// envelopeString is gjson's String() for the value at sp when it is
// absent ("") or a string; ok false for any other value.
func envelopeString(d []byte, sp span) (string, bool) {
	if !sp.ok() {
		return "", true
	}
	if d[sp.s] != '"' {
		return "", false
	}
	return literalText(d[sp.s:sp.e]), true
}
