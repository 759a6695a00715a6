package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chimehq/chime/storage"
)

func TestStoreCheckBackupRestore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	s, err := storage.Open(dir, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b", "c"} {
		if err := s.PutTask(storage.ClockTask{TaskID: id, SessionID: "sess", Task: "t " + id}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "store", "check", "--data-dir", dir)
	if err != nil || !strings.Contains(out, "3 clock tasks") {
		t.Fatalf("check: %q %v", out, err)
	}
	bak := filepath.Join(t.TempDir(), "chime.bak")
	if out, err := run(t, "store", "backup", "--data-dir", dir, bak); err != nil {
		t.Fatalf("backup: %q %v", out, err)
	}
	if _, err := run(t, "store", "restore", "--data-dir", dir, bak); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("restore over a store: %v", err)
	}
	to := filepath.Join(t.TempDir(), "restored")
	if out, err := run(t, "store", "restore", "--data-dir", to, bak); err != nil || !strings.Contains(out, "3 clock tasks") {
		t.Fatalf("restore: %q %v", out, err)
	}

	// Damage the original: check refuses it and names the next step.
	mf := filepath.Join(dir, "MANIFEST")
	st, _ := os.Stat(mf)
	if err := os.Truncate(mf, st.Size()-3); err != nil {
		t.Fatal(err)
	}
	_, err = run(t, "store", "check", "--data-dir", dir)
	if !errors.Is(err, storage.ErrDamaged) || !strings.Contains(err.Error(), "chime store restore") {
		t.Fatalf("check of a damaged store: %v", err)
	}
	if _, err := run(t, "store", "check", "--data-dir", filepath.Join(t.TempDir(), "none")); err == nil || !strings.Contains(err.Error(), "no store") {
		t.Fatalf("check of a missing dir: %v", err)
	}
}
