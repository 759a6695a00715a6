package reqscan

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// benchDoc returns a JSON document of about n bytes: an array of strings,
// each the JSON encoding of unit repeated to a few KB, as in a coding
// agent's tool outputs.
func benchDoc(n int, unit string) []byte {
	s, _ := json.Marshal(strings.Repeat(unit, 4096/len(unit)+1))
	b := []byte{'['}
	for len(b) < n {
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = append(b, s...)
	}
	return append(b, ']')
}

var benchUnits = []struct{ name, unit string }{
	// go test output: an escape every ~12 bytes, some non-ASCII.
	{"escapes", "=== RUN   TestParse/case_1\n    parse_test.go:42: got \"α→β\" want \"α→γ\"\t(diff at C:\\src\\pkg)\n--- FAIL: TestParse (0.01s)\n"},
	{"prose", "The quick brown fox jumps over the lazy dog, then reads the package documentation. "},
	{"code", "func (v *Checker) str(b []byte, i int) int {\n\tif v.tag {\n\t\treturn plainRun(b, i)\n\t}\n}\n"},
	{"cjk", "日本語のテキストと説明、そして「引用」。"},
}

// BenchmarkValid is the validating pass over 1 MB of each kind of text
// with each string scanner, interleaved in one run (best round of each:
// on a loaded machine the minimum carries the least of other processes'
// time). Compare natively and as a wasip1 test binary under wazero.
func BenchmarkValid(b *testing.B) {
	defer func(was bool) { maskScanner = was }(maskScanner)
	for _, u := range benchUnits {
		doc := benchDoc(1<<20, u.unit)
		if !Valid(doc) {
			b.Fatal("invalid bench doc")
		}
		b.Run(u.name, func(b *testing.B) {
			best := [2]time.Duration{time.Hour, time.Hour}
			for b.Loop() {
				for k, masks := range []bool{false, true} {
					maskScanner = masks
					t0 := time.Now()
					Valid(doc)
					best[k] = min(best[k], time.Since(t0))
				}
			}
			mb := float64(len(doc)) / 1e6
			b.ReportMetric(mb/best[0].Seconds(), "stops-MB/s")
			b.ReportMetric(mb/best[1].Seconds(), "masks-MB/s")
			b.ReportMetric(best[0].Seconds()/best[1].Seconds(), "masks/stops")
		})
	}
}
