package wasmhost

import (
	"sync"

	abi "github.com/chimehq/chime/internal/proxywasmabi"
)

// Process-wide shared state, keyed by vm_id as in proxy-wasm-cpp-host
// (shared_data.cc, shared_queue.cc): every VM with the same vm_id sees the
// same key-value store and queues, across workers and factories. The state
// for a vm_id is dropped when the last factory using it closes.
var shared = &sharedState{
	data:   map[string]map[string]*sharedValue{},
	queues: map[queueKey]uint32{},
	byTok:  map[uint32]*sharedQueue{},
	refs:   map[string]int{},
	cas:    1,
	tok:    1,
}

type sharedValue struct {
	value []byte
	cas   uint32
}

type queueKey struct{ vmID, name string }

type sharedQueue struct {
	key   queueKey
	items [][]byte
	// The context that registered the queue last receives on_queue_ready,
	// on that context's VM (Envoy posts it to the registering thread).
	owner   *vmInstance
	ownerID uint32
}

type sharedState struct {
	mu     sync.Mutex
	data   map[string]map[string]*sharedValue
	queues map[queueKey]uint32
	byTok  map[uint32]*sharedQueue
	refs   map[string]int
	cas    uint32
	tok    uint32
}

func (s *sharedState) acquire(vmID string) {
	s.mu.Lock()
	s.refs[vmID]++
	s.mu.Unlock()
}

func (s *sharedState) release(vmID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refs[vmID]--
	if s.refs[vmID] > 0 {
		return
	}
	delete(s.refs, vmID)
	delete(s.data, vmID)
	for k, tok := range s.queues {
		if k.vmID == vmID {
			delete(s.queues, k)
			delete(s.byTok, tok)
		}
	}
}

func (s *sharedState) nextCas() uint32 {
	c := s.cas
	s.cas++
	if s.cas == 0 {
		s.cas = 1
	}
	return c
}

func (s *sharedState) get(vmID, key string) ([]byte, uint32, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.data[vmID][key]
	if !ok {
		return nil, 0, false
	}
	return v.value, v.cas, true
}

// set stores value; a non-zero cas must match the stored one (a missing key
// accepts any cas, as the C++ host does).
func (s *sharedState) set(vmID, key string, value []byte, cas uint32) abi.Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.data[vmID]
	if m == nil {
		m = map[string]*sharedValue{}
		s.data[vmID] = m
	}
	if old, ok := m[key]; ok && cas != 0 && cas != old.cas {
		return abi.StatusCasMismatch
	}
	m[key] = &sharedValue{value: append([]byte(nil), value...), cas: s.nextCas()}
	return abi.StatusOK
}

func (s *sharedState) registerQueue(vmID, name string, owner *vmInstance, ownerID uint32) uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := queueKey{vmID, name}
	tok, ok := s.queues[k]
	if !ok {
		for {
			tok = s.tok
			s.tok++
			if tok != 0 && s.byTok[tok] == nil {
				break
			}
		}
		s.queues[k] = tok
		s.byTok[tok] = &sharedQueue{key: k}
	}
	q := s.byTok[tok]
	q.owner, q.ownerID = owner, ownerID
	return tok
}

func (s *sharedState) resolveQueue(vmID, name string) (uint32, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	tok, ok := s.queues[queueKey{vmID, name}]
	return tok, ok
}

func (s *sharedState) enqueue(tok uint32, value []byte) (*vmInstance, uint32, abi.Status) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.byTok[tok]
	if q == nil {
		return nil, 0, abi.StatusNotFound
	}
	q.items = append(q.items, append([]byte(nil), value...))
	return q.owner, q.ownerID, abi.StatusOK
}

func (s *sharedState) dequeue(tok uint32) ([]byte, abi.Status) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.byTok[tok]
	if q == nil {
		return nil, abi.StatusNotFound
	}
	if len(q.items) == 0 {
		return nil, abi.StatusEmpty
	}
	v := q.items[0]
	q.items = q.items[1:]
	return v, abi.StatusOK
}
