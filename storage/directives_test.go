package storage

import (
	"errors"
	"fmt"
	"slices"
	"testing"
)

// TestDirectiveClaimsInTx: claims made in a transaction are written with
// it, and vanish with it when it fails; they are bounded like
// ClaimDirective's and shared with it.
func TestDirectiveClaimsInTx(t *testing.T) {
	s, err := Open("", Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if ok, err := s.ClaimDirective("a", "old"); !ok || err != nil {
		t.Fatal(ok, err)
	}
	boom := errors.New("boom")
	err = s.Update(func(tx *Tx) error {
		c, err := tx.DirectiveClaims("a")
		if err != nil {
			return err
		}
		if !c.Has("old") || c.Claim("old") || !c.Claim("new") || c.Claim("new") || c.Claim("") {
			t.Error("Claim: want new digests only")
		}
		if err := c.Save(tx); err != nil {
			return err
		}
		if err := tx.PutStopMessage("a", StopMessage{Text: "x", MaxRepeats: 1}); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatal(err)
	}
	if ds, _ := s.DirectiveDigests("a"); !slices.Equal(ds, []string{"old"}) {
		t.Fatalf("after a failed transaction: %v, want [old]", ds)
	}
	err = s.Update(func(tx *Tx) error {
		c, err := tx.DirectiveClaims("a")
		if err != nil {
			return err
		}
		for i := range MaxDirectiveDigests + 1 {
			c.Claim(fmt.Sprint("d", i))
		}
		return c.Save(tx)
	})
	if err != nil {
		t.Fatal(err)
	}
	ds, _ := s.DirectiveDigests("a")
	if len(ds) != MaxDirectiveDigests || ds[0] != "d1" || ds[len(ds)-1] != fmt.Sprint("d", MaxDirectiveDigests) {
		t.Fatalf("bounded claims: %d, first %q", len(ds), ds[0])
	}
	if ok, _ := s.ClaimDirective("a", "d5"); ok {
		t.Fatal("a digest claimed in a transaction is claimed for ClaimDirective too")
	}
	// Nothing claimed: nothing written.
	if err := s.Update(func(tx *Tx) error { c, _ := tx.DirectiveClaims("b"); return c.Save(tx) }); err != nil {
		t.Fatal(err)
	}
	if ds, _ := s.DirectiveDigests("b"); len(ds) != 0 {
		t.Fatal(ds)
	}
}
