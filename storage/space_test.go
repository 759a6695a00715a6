package storage

import (
	"errors"
	"sync/atomic"
	"testing"
)

// fakeFree is an injected statfs.
type fakeFree struct{ free atomic.Uint64 }

func (f *fakeFree) fn(string) (uint64, error) { return f.free.Load(), nil }

func TestWriteRefusedBelowHeadroomThenResumes(t *testing.T) {
	ff := &fakeFree{}
	ff.free.Store(1 << 30)
	s, err := Open(t.TempDir(), Options{MinFree: 10 << 20, FreeSpace: ff.fn})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.PutTask(ClockTask{TaskID: "a", SessionID: "s"}); err != nil {
		t.Fatal(err)
	}
	ff.free.Store(9 << 20)
	err = s.PutTask(ClockTask{TaskID: "b", SessionID: "s"})
	if !errors.Is(err, ErrNoSpace) {
		t.Fatalf("write below the headroom: want ErrNoSpace, got %v", err)
	}
	if sp := s.Space(); !sp.Low || sp.Free != 9<<20 || sp.MinFree != 10<<20 || sp.ReadOnly {
		t.Fatalf("space state %+v", sp)
	}
	if _, ok, err := s.GetTask("s", "a"); err != nil || !ok {
		t.Fatalf("reads must keep working: %v %v", ok, err)
	}
	ff.free.Store(11 << 20)
	if err := s.PutTask(ClockTask{TaskID: "b", SessionID: "s"}); err != nil {
		t.Fatalf("writes must resume once space is back: %v", err)
	}
	if s.Space().Low {
		t.Fatal("still low")
	}
}

func TestOpensReadOnlyOnFullDisk(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutTask(ClockTask{TaskID: "a", SessionID: "s", Task: "kept"}); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()

	ff := &fakeFree{}
	ff.free.Store(1 << 20)
	s, err = Open(dir, Options{FreeSpace: ff.fn})
	if err != nil {
		t.Fatalf("a full disk must open read-only, not fail: %v", err)
	}
	if got, ok, err := s.GetTask("s", "a"); err != nil || !ok || got.Task != "kept" {
		t.Fatalf("read on a read-only store: %+v %v %v", got, ok, err)
	}
	ff.free.Store(1 << 30) // space freed: still read-only until a restart
	if err := s.PutTask(ClockTask{TaskID: "b", SessionID: "s"}); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("want ErrReadOnly, got %v", err)
	}
	if sp := s.Space(); !sp.ReadOnly || !sp.Low {
		t.Fatalf("space state %+v", sp)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("close of a read-only store: %v", err)
	}
	s, err = Open(dir, Options{FreeSpace: ff.fn})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.PutTask(ClockTask{TaskID: "b", SessionID: "s"}); err != nil {
		t.Fatalf("after a restart with space: %v", err)
	}
}
