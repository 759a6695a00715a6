package host

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// TokenFile is the host token `chime up` keeps in the data directory when
// CHIME_HOST_TOKEN is not set (docs/failures.md).
const TokenFile = "host-token"

// LoadOrCreateToken returns the token stored in dataDir/TokenFile, making
// a random one (readable by the owner only, 0600) on first use. created
// reports that it was made now. A token file others can read is refused:
// anyone who has it can act as the filter.
func LoadOrCreateToken(dataDir string) (token string, created bool, err error) {
	path := filepath.Join(dataDir, TokenFile)
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", false, fmt.Errorf("host token: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	switch {
	case err == nil:
		token = rand.Text()
		_, werr := f.WriteString(token + "\n")
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			_ = os.Remove(path)
			return "", false, fmt.Errorf("host token: %w", werr)
		}
		return token, true, nil
	case !errors.Is(err, fs.ErrExist):
		return "", false, fmt.Errorf("host token: %w", err)
	}
	st, err := os.Stat(path)
	if err != nil {
		return "", false, fmt.Errorf("host token: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return "", false, fmt.Errorf("host token: %s is readable by others (mode %v); chmod 600 it or delete it to make a new one", path, st.Mode().Perm())
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", false, fmt.Errorf("host token: %w", err)
	}
	token = strings.TrimSpace(string(raw))
	if token == "" || strings.ContainsAny(token, " \t\r\n\"\\") {
		return "", false, fmt.Errorf("host token: %s does not hold one token (letters, digits); delete it to make a new one", path)
	}
	return token, false, nil
}
