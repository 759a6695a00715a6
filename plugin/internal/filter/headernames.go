package filter

import (
	"github.com/chimehq/chime/hostapi"
)

// The request headers OnHttpRequestHeaders reads, by role.
const (
	roleNone uint8 = iota
	roleMethod
	rolePath
	roleMarker
	roleRequestID
	roleTimezone
	roleLength
	roleEncoding
	roleSession // roleSession+i is sessionHeaderNames[i]
)

// headerRolesByLen lists the names of headerRoleOf by length: most
// headers have a length no name of interest has, and are settled by it.
var headerRolesByLen = func() (t [32][]struct {
	name string
	role uint8
}) {
	add := func(name string, role uint8) {
		t[len(name)] = append(t[len(name)], struct {
			name string
			role uint8
		}{name, role})
	}
	add(":method", roleMethod)
	add(":path", rolePath)
	add(hostapi.HeaderFollowup, roleMarker)
	add("x-request-id", roleRequestID)
	add(hostapi.HeaderTimezone, roleTimezone)
	add("content-length", roleLength)
	add("accept-encoding", roleEncoding)
	for i, name := range sessionHeaderNames[:min(len(sessionHeaderNames), maxSessionHeaders)] {
		add(name, roleSession+uint8(i))
	}
	return t
}()

// headerRoleOf is the role of a request header name, compared without
// ASCII case (Envoy's names are lowercase; another host may keep the
// client's case). Called once per header of every request, so it neither
// lowercases nor hashes: a length check settles most names.
func headerRoleOf(name string) uint8 {
	if len(name) >= len(headerRolesByLen) {
		return roleNone
	}
	for _, c := range headerRolesByLen[len(name)] {
		if equalFoldLower(name, c.name) {
			return c.role
		}
	}
	return roleNone
}

// equalFoldLower reports whether s equals lower, a lowercase ASCII name
// of the same length, ignoring the ASCII case of s.
func equalFoldLower(s, lower string) bool {
	for i := 0; i < len(lower); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}
