package proxywasm

// streamTable maps context ids to HTTP streams: a lookup on every stream
// callback. Hosts number contexts in sequence (Envoy's next_context_id_),
// so the streams alive at once fall in distinct slots of a small ring and
// a lookup is an index and a compare; a map holds the rare entries whose
// slot is taken. Go maps hash with the portable fallback in wasm.
type streamTable struct {
	slots [streamSlots]struct {
		id uint32
		e  *streamEntry
	}
	more map[uint32]*streamEntry
}

const streamSlots = 256 // a power of two

func (t *streamTable) get(id uint32) (*streamEntry, bool) {
	if s := &t.slots[id&(streamSlots-1)]; s.e != nil && s.id == id {
		return s.e, true
	}
	e, ok := t.more[id]
	return e, ok
}

func (t *streamTable) put(id uint32, e *streamEntry) {
	if s := &t.slots[id&(streamSlots-1)]; s.e == nil || s.id == id {
		s.id, s.e = id, e
		if len(t.more) > 0 {
			delete(t.more, id) // an entry of this id there is replaced
		}
		return
	}
	if t.more == nil {
		t.more = map[uint32]*streamEntry{}
	}
	t.more[id] = e
}

func (t *streamTable) del(id uint32) {
	if s := &t.slots[id&(streamSlots-1)]; s.e != nil && s.id == id {
		s.id, s.e = 0, nil
		return
	}
	delete(t.more, id)
}
