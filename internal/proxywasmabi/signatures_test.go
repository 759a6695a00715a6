package proxywasmabi

import (
	"slices"
	"testing"
)

func TestCatalogueNamesAreUnique(t *testing.T) {
	for name, fns := range map[string][]Func{"HostFunctions": HostFunctions, "GuestCallbacks": GuestCallbacks, "NetworkCallbacks": NetworkCallbacks, "WASIFull": WASIFull} {
		seen := map[string]bool{}
		for _, f := range fns {
			if seen[f.Name] {
				t.Errorf("%s lists %s twice", name, f.Name)
			}
			seen[f.Name] = true
		}
	}
}

func TestWASIProfiles(t *testing.T) {
	if len(WASIEnvoy138) != 18 {
		t.Errorf("Envoy 1.38 registers 18 WASI functions, the catalogue has %d", len(WASIEnvoy138))
	}
	for _, f := range WASIEnvoy138 {
		if g, ok := Lookup(WASIFull, f.Name); !ok || !g.SameSignature(f.Params, f.Results) {
			t.Errorf("%s: not in WASIFull with the same signature", f)
		}
	}
	// Signatures Go's syscall package declares (a wrong one fails to link).
	for name, params := range map[string][]ValueType{
		"fd_readdir":  {I32, I32, I32, I64, I32},
		"fd_seek":     {I32, I64, I32, I32},
		"poll_oneoff": {I32, I32, I32, I32},
	} {
		if f, ok := Lookup(WASIFull, name); !ok || !slices.Equal(f.Params, params) {
			t.Errorf("%s params = %v, want %v", name, f.Params, params)
		}
	}
}

func TestHostFunctionVersions(t *testing.T) {
	f, ok := Lookup(HostFunctions, "proxy_get_log_level")
	if !ok || f.Since != V021 {
		t.Fatalf("proxy_get_log_level = %+v, want since 0.2.1", f)
	}
	for _, f := range HostFunctions {
		if f.Module != ModuleEnv || !slices.Equal(f.Results, []ValueType{I32}) {
			t.Errorf("%s: want env and one i32 status result", f)
		}
	}
	if V021.Marker() != "proxy_abi_version_0_2_1" || V020.Marker() != "proxy_abi_version_0_2_0" {
		t.Error("version markers")
	}
}
