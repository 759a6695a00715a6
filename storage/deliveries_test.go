package storage

import (
	"strconv"
	"testing"
)

// The event log keeps the newest entries and those not too old; the
// pending index follows the state.
func TestEventLogTrimAndPendingIndex(t *testing.T) {
	s := openTemp(t)
	for i := uint64(1); i <= 12; i++ {
		ev := SessionEvent{ID: i, SessionID: "a/b", Text: "e" + strconv.FormatUint(i, 10), LoggedAt: int64(i * 1000)}
		if err := s.Update(func(tx *Tx) error { return tx.AppendEvent(ev, 10, 3000) }); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := s.EventsAfter("a/b", 0, 100)
	if err != nil || len(evs) != 10 || evs[0].ID != 3 || evs[9].ID != 12 {
		t.Fatalf("kept %+v %v", evs, err)
	}
	// Age: only events logged at or after 11000 survive the next append.
	if err := s.Update(func(tx *Tx) error {
		return tx.AppendEvent(SessionEvent{ID: 13, SessionID: "a/b", LoggedAt: 13000}, 10, 11000)
	}); err != nil {
		t.Fatal(err)
	}
	if evs, _ := s.EventsAfter("a/b", 0, 100); len(evs) != 3 || evs[0].ID != 11 {
		t.Fatalf("after the age cut %+v", evs)
	}
	if evs, _ := s.EventsAfter("a/b", 12, 100); len(evs) != 1 || evs[0].ID != 13 {
		t.Fatalf("after 12: %+v", evs)
	}
	if evs, _ := s.EventsAfter("a/b", 0, 2); len(evs) != 2 {
		t.Fatalf("limit: %+v", evs)
	}

	var d Delivery
	if err := s.Update(func(tx *Tx) error {
		seq, err := tx.NextDeliverySeq()
		d = Delivery{ID: "d_1", Seq: seq, SessionID: "a/b", RunID: "r", State: DeliveryQueued}
		if err != nil {
			return err
		}
		return tx.PutDelivery(d)
	}); err != nil {
		t.Fatal(err)
	}
	if p, _ := s.PendingDeliveries(); len(p) != 1 || p[0].ID != "d_1" || p[0].Seq != 1 {
		t.Fatalf("pending %+v", p)
	}
	d.State = DeliveryDelivered
	if err := s.Update(func(tx *Tx) error { return tx.PutDelivery(d) }); err != nil {
		t.Fatal(err)
	}
	if p, _ := s.PendingDeliveries(); len(p) != 0 {
		t.Fatalf("delivered still pending %+v", p)
	}
	if ds, _ := s.ListDeliveries("a/b"); len(ds) != 1 || ds[0].State != DeliveryDelivered {
		t.Fatalf("list %+v", ds)
	}
	if err := s.Update(func(tx *Tx) error {
		seq, err := tx.NextDeliverySeq()
		if err == nil && seq != 2 {
			t.Errorf("second seq %d", seq)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}
