package host

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadOrCreateToken: the first call makes a random token readable by
// the owner only; later calls return it; a file others can read, or one
// without a token, is a clear error (docs/failures.md).
func TestLoadOrCreateToken(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	tok, created, err := LoadOrCreateToken(dir)
	if err != nil || !created || len(tok) < 26 || tok == DevToken {
		t.Fatalf("first run: %q %v %v", tok, created, err)
	}
	st, err := os.Stat(filepath.Join(dir, TokenFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("token file mode %v (%v), want 0600", st.Mode().Perm(), err)
	}
	again, created, err := LoadOrCreateToken(dir)
	if err != nil || created || again != tok {
		t.Fatalf("second run: %q %v %v, want the stored %q", again, created, err, tok)
	}
	other, _, _ := LoadOrCreateToken(t.TempDir())
	if other == tok {
		t.Fatal("two data dirs got the same token")
	}
	// The host opens its store beside the token file.
	svc, err := New(Config{DataDir: dir, Token: tok}, nil)
	if err != nil {
		t.Fatalf("store beside the token file: %v", err)
	}
	svc.Close()

	os.Chmod(filepath.Join(dir, TokenFile), 0o644)
	if _, _, err := LoadOrCreateToken(dir); err == nil || !strings.Contains(err.Error(), "readable by others") {
		t.Fatalf("world-readable token file: %v", err)
	}
	os.WriteFile(filepath.Join(dir, TokenFile), []byte("\n"), 0o600)
	os.Chmod(filepath.Join(dir, TokenFile), 0o600)
	if _, _, err := LoadOrCreateToken(dir); err == nil || !strings.Contains(err.Error(), "delete it") {
		t.Fatalf("empty token file: %v", err)
	}
}
