package mockllm

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"
)

// processKey signs the mock's thinking blocks and reasoning items, so a block
// that comes back altered or invented fails like on the real APIs (docs/configuration.md).
var processKey = func() []byte {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		panic("mockllm: no randomness for the signing key: " + err.Error())
	}
	return k
}()

func mac(parts ...string) []byte {
	h := hmac.New(sha256.New, processKey)
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return h.Sum(nil)
}

// thinkingSignature is the signature of an Anthropic thinking block.
func thinkingSignature(text string) string {
	return base64.StdEncoding.EncodeToString(mac("thinking", text))
}

func validThinkingSignature(text, sig string) bool {
	got, err := base64.StdEncoding.DecodeString(sig)
	return err == nil && hmac.Equal(got, mac("thinking", text))
}

// reasoningBlob is the encrypted_content of a Responses reasoning item: the
// item id, authenticated, so a replayed blob names the item it belongs to.
func reasoningBlob(rsID string) string {
	return base64.StdEncoding.EncodeToString(append(mac("reasoning", rsID), rsID...))
}

// openReasoningBlob returns the reasoning item id a blob was issued for.
func openReasoningBlob(blob string) (string, bool) {
	raw, err := base64.StdEncoding.DecodeString(blob)
	if err != nil || len(raw) <= sha256.Size {
		return "", false
	}
	id := string(raw[sha256.Size:])
	if !hmac.Equal(raw[:sha256.Size], mac("reasoning", id)) {
		return "", false
	}
	return id, true
}

const alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// newID returns the next id of a kind in the shape the real provider uses
// (toolu_01…, call_…, fc_…, rs_…, msg_…). Ids derive from a per-server
// counter, so one server's ids are unique and the same run to run.
// The caller holds s.mu.
func (s *Server) newID(kind string) string {
	s.idSeq++
	sum := sha256.Sum256(fmt.Appendf(nil, "mockllm %s %d", kind, s.idSeq))
	switch kind {
	case "toolu":
		return "toolu_01" + encodeAlnum(sum[:], 22)
	case "call":
		return "call_" + encodeAlnum(sum[:], 24)
	}
	return kind + "_" + hex.EncodeToString(sum[:24])
}

func encodeAlnum(b []byte, n int) string {
	var sb strings.Builder
	for i := range n {
		sb.WriteByte(alnum[int(b[i%len(b)])%len(alnum)])
	}
	return sb.String()
}
