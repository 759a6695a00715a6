package benchwork

import (
	"testing"

	"github.com/chimehq/chime/llm"
)

// BenchmarkEditStages splits Edit into its passes, to see which of them
// the wasm backend slows most (run natively, and as a wasip1 test binary
// under wazero).
func BenchmarkEditStages(b *testing.B) {
	body := SampleChatBody(benchSize)
	b.Run("parse", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if _, err := llm.ParseRequest(llm.Chat, body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parse+strip", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			r, _ := llm.ParseRequest(llm.Chat, body)
			r.Directives()
			r.StripDirectives()
		}
	})
	b.Run("edit", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		var out []byte
		for b.Loop() {
			out, _ = Edit(body, out)
		}
	})
	b.Run("copy", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		var out []byte
		for b.Loop() {
			out = append(out[:0], body...)
		}
	})
}
