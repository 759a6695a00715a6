//go:build !linux

package wasmhost

import "context"

// withGuestMemory keeps wazero's default slice-backed memory off Linux.
func withGuestMemory(ctx context.Context) context.Context { return ctx }
