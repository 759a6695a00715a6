package llm

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// The fast path: when the validating pass saw no string that may hold a
// tag (Request.tagHint false), scan skips reading directives and planning
// the strip. These tests hold it to the full path's results: forcing
// tagHint on must not change a single output.

// editAll runs the filter's request edit on r and returns everything it
// produces.
func editAll(t *testing.T, r *Request) (dirs []Directive, firstNew, stripped int, out []byte) {
	t.Helper()
	dirs = r.Directives()
	firstNew = r.FirstNewUserMessage()
	stripped = r.StripDirectives()
	if err := r.AppendUserText("[Time/Date]: now"); err != nil && !errors.Is(err, ErrBodyShape) {
		t.Fatal(err)
	}
	if err := r.InjectTools([]ToolSpec{strictTool()}); err != nil && !errors.Is(err, ErrBodyShape) {
		t.Fatal(err)
	}
	return dirs, firstNew, stripped, r.Bytes()
}

func checkFastPath(t *testing.T, p Protocol, body []byte) {
	t.Helper()
	fast, err := ParseRequest(p, body)
	if err != nil {
		return
	}
	full, err := ParseRequest(p, body)
	if err != nil {
		t.Fatalf("second parse failed: %v", err)
	}
	full.tagHint = true
	fd, ff, fs, fo := editAll(t, fast)
	wd, wf, ws, wo := editAll(t, full)
	// AppendBytes builds what Bytes does, after what dst holds.
	if got := fast.AppendBytes([]byte("dst:")); string(got) != "dst:"+string(fo) || fast.Size() != len(fo) {
		t.Fatalf("AppendBytes = %s (Size %d), Bytes = %s", got, fast.Size(), fo)
	}
	if !reflect.DeepEqual(fd, wd) || ff != wf || fs != ws || !bytes.Equal(fo, wo) {
		t.Fatalf("fast path (tagHint=%v) differs from the full path for %s\nfast: %v %d %d %s\nfull: %v %d %d %s",
			fast.tagHint, body, fd, ff, fs, fo, wd, wf, ws, wo)
	}
}

func TestFastPathMatchesFullPath(t *testing.T) {
	for _, body := range [][]byte{
		[]byte(`{"messages":[{"role":"user","content":"plain"},{"role":"assistant","content":"a"},{"role":"user","content":[{"type":"image"},{"type":"text","text":"t"}]}]}`),
		[]byte(`{"messages":[{"role":"user","content":"has <** a tag **>"}]}`),
		[]byte(`{"input":"no tags here at all, just words"}`),
		[]byte(`{"input":[{"type":"function_call"},{"role":"user","content":[{"type":"input_text","text":"x"}]}]}`),
		[]byte(`{"messages":[{"role":"user","content":[{"type":"tool_result","content":"r"}]},{"role":"system","content":"s"}]}`),
	} {
		for p := Chat; p <= Messages; p++ {
			checkFastPath(t, p, body)
		}
	}
}

func FuzzRequestFastPath(f *testing.F) {
	for _, b := range requestSeeds(f) {
		for p := uint8(0); p < 3; p++ {
			f.Add(p, b)
		}
	}
	f.Fuzz(func(t *testing.T, mode uint8, body []byte) {
		checkFastPath(t, Protocol(mode%3)+Chat, body)
	})
}
