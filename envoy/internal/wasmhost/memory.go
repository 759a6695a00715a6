package wasmhost

// sliceMemory is the fallback linear memory: a Go slice that grows by
// copying, as wazero does by default.
type sliceMemory struct {
	buf []byte
	max uint64
}

func (m *sliceMemory) Reallocate(size uint64) []byte {
	if size > m.max {
		return nil
	}
	if size <= uint64(cap(m.buf)) {
		m.buf = m.buf[:size]
		return m.buf
	}
	grown := make([]byte, size, min(m.max, max(size, 2*uint64(cap(m.buf)))))
	copy(grown, m.buf)
	m.buf = grown
	return m.buf
}

func (m *sliceMemory) Free() { m.buf = nil }
