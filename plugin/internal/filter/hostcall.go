package filter

import (
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/plugin/proxywasm"
)

const (
	// tickPeriodMs is how often the filter ticks: it reports sessions that
	// skipped prepare and restarts a failed generation poll (skip.go).
	tickPeriodMs = 1_000
	// statePeriod is how often the tick refreshes the NTP offset when no
	// generation poll brings it (skipPrepare off).
	statePeriod = 30 * time.Second
	// backgroundTimeoutMs bounds the calls nobody waits for: outcomes and
	// the tick's state refresh.
	backgroundTimeoutMs = 5_000
	// maxAnswerBytes caps how much of a host answer is read.
	maxAnswerBytes = 1 << 20
)

// callHost sends one request to the host cluster with the shared token
// (docs/configuration.md, llm/hostapi.go). body nil sends a GET.
func (p *pluginContext) callHost(path string, body []byte, timeoutMs int64, cb proxywasm.HttpCallCallback) error {
	method := "POST"
	if body == nil {
		method = "GET"
	}
	headers := [][2]string{
		{":method", method},
		{":path", path},
		{":authority", p.cfg.HostAuthority},
	}
	if body != nil {
		headers = append(headers, [2]string{"content-type", "application/json"})
	}
	if p.cfg.Token != "" {
		headers = append(headers, [2]string{"authorization", "Bearer " + p.cfg.Token})
	}
	_, err := proxywasm.DispatchHttpCall(p.cfg.HostCluster, headers, body, nil, uint32(timeoutMs), cb)
	return err
}

// readAnswer decodes the host answer being delivered into v. It returns
// "" on success, or why the call failed: no answer (timeout, reset,
// unreachable: numHeaders is 0), a non-2xx status, or a body that is not
// the expected JSON.
func readAnswer(numHeaders, bodySize int, v any) (failure string) {
	if numHeaders == 0 {
		return "no response (timeout, reset or unreachable)"
	}
	body, _ := proxywasm.GetHttpCallResponseBody(0, min(bodySize, maxAnswerBytes))
	if status := httpCallStatus(); status < 200 || status > 299 {
		failure = "status " + strconv.Itoa(status)
		if len(body) > 0 {
			failure += ": " + string(body[:min(len(body), 256)])
		}
		return failure
	}
	if v == nil {
		return ""
	}
	var err error
	if ans, ok := v.(*hostapi.PrepareResponse); ok {
		err = decodePrepareAnswer(body, ans) // once per request: the fast path
	} else {
		err = json.Unmarshal(body, v)
	}
	if err != nil {
		return "unreadable answer: " + err.Error()
	}
	return ""
}

// httpCallStatus is the :status of the HTTP call response being delivered,
// or 0 when absent or malformed.
func httpCallStatus() int {
	hs, err := proxywasm.GetHttpCallResponseHeaders()
	if err != nil {
		return 0
	}
	for _, kv := range hs {
		if kv[0] == ":status" {
			n, err := strconv.Atoi(kv[1])
			if err != nil {
				return 0
			}
			return n
		}
	}
	return 0
}

// newRequestID makes the unguessable 128-bit hex id of one request: the
// key of its reservation, resolve and cancel, and the prefix of its
// followups' ids (docs/failures.md). math/rand/v2's global source is the
// runtime's ChaCha8, seeded from WASI random_get, which Envoy provides.
// Not crypto/rand: it arms a timer per read, and a timer makes the Go
// runtime call poll_oneoff, which Envoy 1.38 does not implement.
func newRequestID() string {
	var b [16]byte
	for i := 0; i < len(b); i += 8 {
		v := rand.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	var out [32]byte
	hex.Encode(out[:], b[:])
	return string(out[:]) // one allocation, not EncodeToString's two
}
