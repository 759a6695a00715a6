package proxy

import (
	"io"
	"net/http"
	"testing"
	"unsafe"
)

// A body written whole is queued without a copy, and a later write never
// appends into spare capacity the writer still holds.
func TestBodyQueueTakesOverWithoutCopy(t *testing.T) {
	q := newBodyQueue(1<<20, func() {})
	body := make([]byte, 3, 16)
	copy(body, "abc")
	q.write(body)
	if got := q.drain(); unsafe.SliceData(got) != unsafe.SliceData(body) || string(got) != "abc" {
		t.Fatalf("drain = %q, not the written slice", got)
	}
	q.write(body)
	q.write([]byte("xyz"))
	if spare := body[:6]; string(spare[3:]) == "xyz" {
		t.Fatal("second write appended into the first writer's spare capacity")
	}
	q.close()
	got, err := io.ReadAll(q)
	if err != nil || string(got) != "abcxyz" {
		t.Fatalf("read %q, %v", got, err)
	}
}

func TestBufferSizeUsesContentLength(t *testing.T) {
	req := func(cl int64) *stream { return &stream{r: &http.Request{ContentLength: cl}, limit: 1 << 20} }
	for _, c := range []struct {
		name   string
		c      *chain
		need   int
		expect int
	}{
		{"known length", &chain{s: req(5000)}, 100, 5000},
		{"unknown length", &chain{s: req(-1)}, 100, 100},
		{"over the limit", &chain{s: req(2 << 20)}, 100, 100},
		{"already past it", &chain{s: req(50)}, 100, 100},
		{"responses", &chain{s: req(5000), encode: true}, 100, 100},
	} {
		if got := c.c.bufferSize(c.need); got != c.expect {
			t.Errorf("%s: bufferSize(%d) = %d, want %d", c.name, c.need, got, c.expect)
		}
	}
}
