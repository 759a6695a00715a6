package storage

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	badger "github.com/dgraph-io/badger/v4"
)

// sharedRound queues the calls of fns while a first call holds the
// committer, so that all of them run in the next round, and returns what
// each call returned.
func sharedRound(t *testing.T, s *Store, fns []func(*Tx) error) []error {
	t.Helper()
	hold, held := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		err := s.UpdateShared(func(tx *Tx) error {
			select {
			case <-held:
			default:
				close(held)
			}
			<-hold
			return tx.PutStopMessage("holder", StopMessage{Text: "h", MaxRepeats: 1})
		})
		if err != nil {
			t.Errorf("holder: %v", err)
		}
	})
	<-held
	errs := make([]error, len(fns))
	// One call at a time, each waiting (yielding, no timing involved)
	// until it is queued: the queue holds them in the order of fns.
	for i, fn := range fns {
		wg.Go(func() { errs[i] = s.UpdateShared(fn) })
		for {
			s.group.mu.Lock()
			n := len(s.group.queue)
			s.group.mu.Unlock()
			if n == i+1 {
				break
			}
			runtime.Gosched()
		}
	}
	close(hold)
	wg.Wait()
	return errs
}

func TestUpdateSharedOneTransaction(t *testing.T) {
	s := openTemp(t)
	const n = 50
	txs := make([]*Tx, n)
	fns := make([]func(*Tx) error, n)
	for i := range fns {
		fns[i] = func(tx *Tx) error {
			txs[i] = tx
			return tx.PutStopMessage(fmt.Sprintf("s%d", i), StopMessage{Text: "go on", MaxRepeats: 1})
		}
	}
	for i, err := range sharedRound(t, s, fns) {
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	for i := range txs {
		if txs[i] != txs[0] {
			t.Fatalf("call %d ran in another transaction than call 0: not one group commit", i)
		}
		if m, ok, err := s.GetStopMessage(fmt.Sprintf("s%d", i)); err != nil || !ok || m.Text != "go on" {
			t.Fatalf("s%d after the commit: %+v %v %v", i, m, ok, err)
		}
	}
}

func TestUpdateSharedSeesEarlierCalls(t *testing.T) {
	s := openTemp(t)
	const n = 20
	fns := make([]func(*Tx) error, n)
	for i := range fns {
		fns[i] = func(tx *Tx) error { // read-modify-write of one record
			m, _, err := tx.StopMessage("counter")
			if err != nil {
				return err
			}
			m.Text, m.MaxRepeats = "x", m.MaxRepeats+1
			return tx.PutStopMessage("counter", m)
		}
	}
	for i, err := range sharedRound(t, s, fns) {
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if m, _, err := s.GetStopMessage("counter"); err != nil || m.MaxRepeats != n {
		t.Fatalf("counter = %d (%v), want %d: calls of one transaction must see each other", m.MaxRepeats, err, n)
	}
}

func TestUpdateSharedFailingCallAppliesNothing(t *testing.T) {
	s := openTemp(t)
	const n = 10
	boom := errors.New("boom")
	runs := make([]int, n)
	fns := make([]func(*Tx) error, n)
	for i := range fns {
		fns[i] = func(tx *Tx) error {
			runs[i]++
			if err := tx.PutStopMessage(fmt.Sprintf("s%d", i), StopMessage{Text: "go on", MaxRepeats: 1}); err != nil {
				return err
			}
			switch i {
			case 3:
				return boom // after its write: the write must not land
			case 6:
				panic("bad call")
			}
			return nil
		}
	}
	errs := sharedRound(t, s, fns)
	for i, err := range errs {
		_, ok, gerr := s.GetStopMessage(fmt.Sprintf("s%d", i))
		if gerr != nil {
			t.Fatal(gerr)
		}
		switch i {
		case 3:
			if !errors.Is(err, boom) || ok {
				t.Fatalf("failing call: err %v, written %v; want boom and nothing written", err, ok)
			}
		case 6:
			if err == nil || !strings.Contains(err.Error(), "bad call") || ok {
				t.Fatalf("panicking call: err %v, written %v; want its panic and nothing written", err, ok)
			}
		default:
			if err != nil || !ok {
				t.Fatalf("call %d: err %v, written %v; the others must commit", i, err, ok)
			}
		}
	}
	if runs[0] < 2 {
		t.Fatalf("call 0 ran %d times: the round is not run again without the failing calls", runs[0])
	}
}

func TestUpdateSharedSplitsTooBig(t *testing.T) {
	s := openTemp(t)
	// Values under the value threshold count in full against Badger's
	// batch size (15% of the 8 MiB memtable): 40 × 60 KB is too big for
	// one transaction, each alone fits.
	big := strings.Repeat("x", 60<<10)
	const n = 40
	txs := make([]*Tx, n)
	fns := make([]func(*Tx) error, n)
	for i := range fns {
		fns[i] = func(tx *Tx) error {
			txs[i] = tx
			return tx.PutStopMessage(fmt.Sprintf("s%d", i), StopMessage{Text: big, MaxRepeats: 1})
		}
	}
	// One call too big on its own fails alone.
	fns = append(fns, func(tx *Tx) error {
		for j := range 40 {
			if err := tx.PutStopMessage(fmt.Sprintf("huge%d", j), StopMessage{Text: big, MaxRepeats: 1}); err != nil {
				return err
			}
		}
		return nil
	})
	errs := sharedRound(t, s, fns)
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("call %d: %v", i, errs[i])
		}
		if _, ok, err := s.GetStopMessage(fmt.Sprintf("s%d", i)); err != nil || !ok {
			t.Fatalf("s%d not written: %v", i, err)
		}
	}
	if txs[0] == txs[n-1] {
		t.Fatal("40 × 60 KB committed in one transaction: the test does not exceed Badger's limit")
	}
	if !errors.Is(errs[n], badger.ErrTxnTooBig) {
		t.Fatalf("call too big alone: %v, want ErrTxnTooBig", errs[n])
	}
	if _, ok, _ := s.GetStopMessage("huge0"); ok {
		t.Fatal("the call too big alone wrote part of its records")
	}
}

func TestUpdateSharedConcurrentCallers(t *testing.T) {
	s := openTemp(t)
	const n = 300
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			errs[i] = s.UpdateShared(func(tx *Tx) error {
				return tx.PutStopMessage(fmt.Sprintf("c%d", i), StopMessage{Text: "go on", MaxRepeats: 1})
			})
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("call %d: %v", i, errs[i])
		}
		if _, ok, err := s.GetStopMessage(fmt.Sprintf("c%d", i)); err != nil || !ok {
			t.Fatalf("c%d not written: %v", i, err)
		}
	}
	s.group.mu.Lock()
	defer s.group.mu.Unlock()
	if s.group.leading || len(s.group.queue) != 0 {
		t.Fatalf("after every call returned: leading %v, %d queued", s.group.leading, len(s.group.queue))
	}
}
