package host

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	"github.com/chimehq/chime/hostapi"
)

// FuzzPrepareBody: any body gets 200 with a well-formed answer or a 400
// JSON error, never a 5xx or a panic (docs/failures.md).
func FuzzPrepareBody(f *testing.F) {
	fx := newFixture(f)
	for _, seed := range []string{
		`{"requestId":"r","protocol":"chat","sessionId":"s","timezone":"Europe/Berlin"}`,
		`{"requestId":"r","sessionId":"s","directives":[{"kind":"stopMessage","text":"go","maxRepeats":3}]}`,
		`{"requestId":"r","sessionId":"s","directives":[{"kind":"clock","clock":{"dueAt":"2026-02-02T21:00:30Z","task":"t","tool":"","arguments":"{}","repeat":"every 5m","maxRuns":2}}]}`,
		`{"requestId":"r","sessionId":"s","directives":[{"kind":"clock","clock":null},{"kind":"route","route":"a\u0000b"},{"kind":"clock:clear"}]}`,
		`{"sessionId":"s","timezone":"Not/AZone"}`,
		`{"requestId":"r","sessionId":"s","previousResponseId":"resp_1","directives":[{"kind":"route","route":"r","position":3},{"kind":"route","route":"r","position":3},{"kind":"clock:clear","position":-1}]}`,
		`{"requestId":7}`, `{`, `null`, `[]`, ``, `{"directives":[{}]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := serve(fx.svc, func() *http.Request {
			r := newRequest(http.MethodPost, hostapi.PathPrepare, body)
			r.Header.Set("Authorization", "Bearer "+testToken)
			return r
		}())
		switch rec.Code {
		case http.StatusOK:
			var ans hostapi.PrepareResponse
			if err := json.Unmarshal(rec.Body.Bytes(), &ans); err != nil {
				t.Fatalf("200 with a bad body %q: %v", rec.Body, err)
			}
			if ans.NowMs != t0.UnixMilli() || !slices.Equal(ans.Tools, allTools) {
				t.Fatalf("answer %+v", ans)
			}
		case http.StatusBadRequest:
			var e map[string]string
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e["error"] == "" {
				t.Fatalf("400 without a JSON error: %q", rec.Body)
			}
		default:
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body)
		}
	})
}
