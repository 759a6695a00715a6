package directive

import (
	"errors"
	"fmt"
	"testing"
)

func TestRejected(t *testing.T) {
	base := errors.New("text is empty")
	r := Reject(base)
	if !IsRejected(r) || !errors.Is(r, base) || r.Error() != "text is empty" {
		t.Fatalf("Reject(%v) = %v", base, r)
	}
	if !IsRejected(fmt.Errorf("stage: %w", r)) {
		t.Fatal("a wrapped rejection is still one")
	}
	if IsRejected(base) || IsRejected(nil) || Reject(nil) != nil {
		t.Fatal("only marked errors are rejections")
	}
	if e := Rejectf("repeats %d", 0); !IsRejected(e) || e.Error() != "repeats 0" {
		t.Fatalf("Rejectf = %v", e)
	}
}
