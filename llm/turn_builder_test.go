package llm

import (
	"reflect"
	"testing"

	"github.com/chimehq/chime/llm/internal/reqscan"
	"github.com/tidwall/gjson"
)

// FuzzPlainDelta: a block delta plainDelta reads folds into the block as
// addDelta's general reading folds it, from a block that already holds
// pieces; plainDelta takes the thinking and signature deltas of the saved
// streams. Parts are valid JSON, as the classifier leaves them.
func FuzzPlainDelta(f *testing.F) {
	taken := 0
	for _, d := range savedEventData(f, "messages_*.sse") {
		ev := Event{Data: d, Index: -1}
		var s classifyState
		if s.classify(Messages, &ev); ev.PartKind != PartBlockDelta {
			continue
		}
		f.Add(ev.Part)
		if _, _, ok := plainDelta(ev.Part); ok {
			taken++
		}
	}
	if taken < 3 {
		f.Fatalf("plainDelta took %d deltas of the saved streams", taken)
	}
	for _, p := range []string{
		`{"type":"thinking_delta","thinking":"a \u00e9 \"q\" \\ b"}`,
		`{"type":"signature_delta","signature":"EqQ="}`,
		`{"type":"thinking_delta","thinking":""}`,
		`{"type":"citations_delta","citation":"x"}`,
		`{"type":"citations_delta","other":"x"}`,
		`{"type":"x","type":"y"}`,
		`{"type":"x","thinking":"a","thinking":"b"}`,
		`{"type":"x","thinking":"a","signature":"b"}`,
		`{"type":"x","th-ink":"a"}`,
		`{"type":"x","thinking":7}`,
		`{"type":"x\u0031","thinking":"a"}`,
		`{"type":"x","think\u0069ng":"a"}`,
		`{"type":"x","thinking":"a"} `,
		`{"type":"x", "thinking":"a"}`,
		`{"type":"x","thinking":"a\"}"}`,
	} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, part string) {
		if !gjson.Valid(part) || !reqscan.Valid([]byte(part)) {
			return
		}
		key, val, ok := plainDelta(part)
		if !ok {
			return
		}
		seed := []streamField{{name: "thinking", str: []byte("so far ")}, {name: "n", raw: "1"}}
		fast := &rawBlock{appended: clone(seed)}
		accumulateString(&fast.appended, key, val)
		slow := &rawBlock{appended: clone(seed)}
		slow.addDelta(part)
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%s:\n plainDelta %q %q -> %+v\n addDelta %+v", part, key, val, fast, slow)
		}
	})
}

func clone(fs []streamField) []streamField {
	out := make([]streamField, len(fs))
	for i, f := range fs {
		out[i] = streamField{name: f.name, str: append([]byte(nil), f.str...), raw: f.raw}
	}
	return out
}

// BenchmarkThinkingDeltaFold: folding a thinking delta into its block by
// plainDelta and by addDelta's gjson reading (run it under wazero to see
// the guest's figures: GOOS=wasip1 GOARCH=wasm go test -c).
func BenchmarkThinkingDeltaFold(b *testing.B) {
	part := `{"type":"thinking_delta","thinking":"The user wants the failing tests: read the build log first, then grep it for FAIL lines and look at each stack trace."}`
	for _, path := range []string{"plain", "general"} {
		b.Run(path, func(b *testing.B) {
			var blk rawBlock
			for i := 0; b.Loop(); i++ {
				if i%64 == 0 {
					blk = rawBlock{} // an answer's worth of deltas
				}
				if key, val, ok := plainDelta(part); ok && path == "plain" {
					accumulateString(&blk.appended, key, val)
				} else {
					blk.addDelta(part)
				}
			}
		})
	}
}
