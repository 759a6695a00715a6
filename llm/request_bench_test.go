package llm

import (
	"encoding/json"
	"testing"
)

const benchSize = 1 << 20

func TestSampleChatBody(t *testing.T) {
	b := SampleChatBody(benchSize)
	if !json.Valid(b) || len(b) < benchSize*9/10 || len(b) > benchSize*11/10 {
		t.Fatalf("bad sample: valid=%v len=%d", json.Valid(b), len(b))
	}
	r, err := ParseRequest(Chat, b)
	must(t, err)
	if n := r.StripDirectives(); n < 3 {
		t.Fatalf("sample has %d directives", n)
	}
}

// editSample is the filter's request-path work on one body.
func editSample(b []byte) []byte {
	r, err := ParseRequest(Chat, b)
	if err != nil {
		panic(err)
	}
	r.Directives()
	r.StripDirectives()
	if err := r.AppendUserText("[Time/Date]: utc=`2026-02-02T21:22:38.229Z` local=`2026-02-02 13:22:38.229 -08:00` tz=`America/Los_Angeles` nowMs=`1770038558229` ntpOffsetMs=`-12`"); err != nil {
		panic(err)
	}
	if err := r.InjectTools([]ToolSpec{ClockToolSpec()}); err != nil {
		panic(err)
	}
	return r.Bytes()
}

func BenchmarkEdit1MB(b *testing.B) {
	body := SampleChatBody(benchSize)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		editSample(body)
	}
}

func BenchmarkCopy1MB(b *testing.B) {
	body := SampleChatBody(benchSize)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	var sink []byte
	for b.Loop() {
		sink = append([]byte(nil), body...)
	}
	_ = sink
}
