package proxywasmabi

import "slices"

// ValueType is a wasm value type in its binary encoding (the values
// wazero's api.ValueType uses too).
type ValueType byte

// The value types the ABI uses.
const (
	I32 ValueType = 0x7f
	I64 ValueType = 0x7e
)

func (t ValueType) String() string {
	switch t {
	case I32:
		return "i32"
	case I64:
		return "i64"
	}
	return "unknown"
}

// Func is one function crossing the guest/host boundary: a host function
// the guest imports from Module, or a callback the guest exports (Module
// "").
type Func struct {
	Module  string
	Name    string
	Params  []ValueType
	Results []ValueType
	// Since is the first ABI version that has the function (0: all).
	Since Version
}

func (f Func) String() string {
	if f.Module == "" {
		return f.Name
	}
	return f.Module + "." + f.Name
}

// SameSignature reports whether params and results match f's.
func (f Func) SameSignature(params, results []ValueType) bool {
	return slices.Equal(f.Params, params) && slices.Equal(f.Results, results)
}

// Version is an ABI version a module advertises by exporting a marker
// function.
type Version int

// ABI versions. Envoy runs 0.2.0 and 0.2.1 modules and refuses 0.1.0.
const (
	V010 Version = iota + 1
	V020
	V021
)

// Marker is the name of the export that advertises v.
func (v Version) Marker() string {
	switch v {
	case V010:
		return "proxy_abi_version_0_1_0"
	case V020:
		return "proxy_abi_version_0_2_0"
	case V021:
		return "proxy_abi_version_0_2_1"
	}
	return ""
}

// Module names of the imports.
const (
	ModuleEnv  = "env"
	ModuleWASI = "wasi_snapshot_preview1"
	// ModuleWASIUnstable is the older WASI name; proxy-wasm-cpp-host
	// registers the same functions under it.
	ModuleWASIUnstable = "wasi_unstable"
)

func words(n int) []ValueType { return slices.Repeat([]ValueType{I32}, n) }

var status = words(1) // every proxy_* host function returns a proxy_status_t

func env(name string, params ...ValueType) Func {
	return Func{Module: ModuleEnv, Name: name, Params: params, Results: status}
}

func envWords(name string, n int) Func { return env(name, words(n)...) }

// HostFunctions is every env.proxy_* function Envoy registers for ABI
// v0.2.x, with its signature.
var HostFunctions = []Func{
	envWords("proxy_log", 3),
	{Module: ModuleEnv, Name: "proxy_get_log_level", Params: words(1), Results: status, Since: V021},
	envWords("proxy_get_status", 3),
	envWords("proxy_get_property", 4),
	envWords("proxy_set_property", 4),
	envWords("proxy_send_local_response", 8),
	envWords("proxy_get_shared_data", 5),
	envWords("proxy_set_shared_data", 5),
	envWords("proxy_register_shared_queue", 3),
	envWords("proxy_resolve_shared_queue", 5),
	envWords("proxy_dequeue_shared_queue", 3),
	envWords("proxy_enqueue_shared_queue", 3),
	envWords("proxy_get_header_map_value", 5),
	envWords("proxy_add_header_map_value", 5),
	envWords("proxy_replace_header_map_value", 5),
	envWords("proxy_remove_header_map_value", 3),
	envWords("proxy_get_header_map_pairs", 3),
	envWords("proxy_set_header_map_pairs", 3),
	envWords("proxy_get_header_map_size", 2),
	envWords("proxy_get_buffer_status", 3),
	envWords("proxy_get_buffer_bytes", 5),
	envWords("proxy_set_buffer_bytes", 5),
	envWords("proxy_http_call", 10),
	envWords("proxy_grpc_call", 12),
	envWords("proxy_grpc_stream", 9),
	envWords("proxy_grpc_close", 1),
	envWords("proxy_grpc_cancel", 1),
	envWords("proxy_grpc_send", 4),
	envWords("proxy_set_tick_period_milliseconds", 1),
	envWords("proxy_get_current_time_nanoseconds", 1),
	envWords("proxy_define_metric", 4),
	env("proxy_increment_metric", I32, I64),
	env("proxy_record_metric", I32, I64),
	envWords("proxy_get_metric", 2),
	envWords("proxy_set_effective_context", 1),
	envWords("proxy_done", 0),
	envWords("proxy_call_foreign_function", 6),
	envWords("proxy_continue_stream", 1),
	envWords("proxy_close_stream", 1),
}

func callback(name string, params, results int) Func {
	return Func{Name: name, Params: words(params), Results: words(results)}
}

// GuestCallbacks is every export a v0.2.1 HTTP filter module may provide
// besides its version marker, with the signature Envoy calls it with.
var GuestCallbacks = []Func{
	callback("proxy_on_memory_allocate", 1, 1),
	callback("proxy_on_context_create", 2, 0),
	callback("proxy_on_vm_start", 2, 1),
	callback("proxy_on_configure", 2, 1),
	callback("proxy_on_request_headers", 3, 1),
	callback("proxy_on_request_body", 3, 1),
	callback("proxy_on_request_trailers", 2, 1),
	callback("proxy_on_response_headers", 3, 1),
	callback("proxy_on_response_body", 3, 1),
	callback("proxy_on_response_trailers", 2, 1),
	callback("proxy_on_http_call_response", 5, 0),
	callback("proxy_on_tick", 1, 0),
	callback("proxy_on_queue_ready", 2, 0),
	callback("proxy_on_foreign_function", 3, 0),
	callback("proxy_on_log", 1, 0),
	callback("proxy_on_done", 1, 1),
	callback("proxy_on_delete", 1, 0),
}

// NetworkCallbacks are the exports of a network (TCP) filter module, with
// the signature Envoy calls them with. They are not part of GuestCallbacks,
// which an HTTP filter is checked against.
var NetworkCallbacks = []Func{
	callback("proxy_on_new_connection", 1, 1),
	callback("proxy_on_downstream_data", 3, 1),
	callback("proxy_on_upstream_data", 3, 1),
	callback("proxy_on_downstream_connection_close", 2, 0),
	callback("proxy_on_upstream_connection_close", 2, 0),
}

func wasi(name string, params ...ValueType) Func {
	return Func{Module: ModuleWASI, Name: name, Params: params, Results: words(1)}
}

func wasiWords(name string, n int) Func { return wasi(name, words(n)...) }

// WASIEnvoy138 is every WASI function released Envoy 1.33–1.38 registers:
// proxy-wasm-cpp-host's list before its "add all wasi hostcalls used by Go
// SDK" change (#533, after Envoy 1.38). Of these, poll_oneoff answers
// ENOSYS, so a Go guest whose runtime sleeps crashes (golang/go#78513).
var WASIEnvoy138 = []Func{
	wasiWords("fd_write", 4),
	wasiWords("fd_read", 4),
	wasi("fd_seek", I32, I64, I32, I32),
	wasiWords("fd_close", 1),
	wasiWords("fd_fdstat_get", 2),
	wasiWords("fd_fdstat_set_flags", 2),
	wasiWords("environ_get", 2),
	wasiWords("environ_sizes_get", 2),
	wasiWords("args_get", 2),
	wasiWords("args_sizes_get", 2),
	wasi("clock_time_get", I32, I64, I32),
	wasiWords("random_get", 2),
	wasiWords("sched_yield", 0),
	wasiWords("poll_oneoff", 4),
	{Module: ModuleWASI, Name: "proc_exit", Params: words(1)},
	wasi("path_open", I32, I32, I32, I32, I32, I64, I64, I32, I32),
	wasiWords("fd_prestat_get", 2),
	wasiWords("fd_prestat_dir_name", 3),
}

// WASIFull is the whole WASI preview1 set proxy-wasm-cpp-host registers
// since #533 (Envoy's main branch, released in 1.39): WASIEnvoy138 plus
// these, with poll_oneoff really waiting.
var WASIFull = append(slices.Clone(WASIEnvoy138),
	wasiWords("fd_filestat_get", 2),
	wasiWords("path_filestat_get", 5),
	wasiWords("clock_res_get", 2),
	wasi("fd_advise", I32, I64, I64, I32),
	wasi("fd_allocate", I32, I64, I64),
	wasiWords("fd_datasync", 1),
	wasi("fd_fdstat_set_rights", I32, I64, I64),
	wasi("fd_filestat_set_size", I32, I64),
	wasi("fd_filestat_set_times", I32, I64, I64, I32),
	wasi("fd_pread", I32, I32, I32, I64, I32),
	wasi("fd_pwrite", I32, I32, I32, I64, I32),
	wasi("fd_readdir", I32, I32, I32, I64, I32),
	wasiWords("fd_renumber", 2),
	wasiWords("fd_sync", 1),
	wasiWords("fd_tell", 2),
	wasiWords("path_create_directory", 3),
	wasi("path_filestat_set_times", I32, I32, I32, I32, I64, I64, I32),
	wasiWords("path_link", 7),
	wasiWords("path_readlink", 6),
	wasiWords("path_remove_directory", 3),
	wasiWords("path_rename", 6),
	wasiWords("path_symlink", 5),
	wasiWords("path_unlink_file", 3),
	wasiWords("sock_accept", 3),
	wasiWords("sock_recv", 6),
	wasiWords("sock_send", 5),
	wasiWords("sock_shutdown", 2),
)

// Lookup finds name in fns.
func Lookup(fns []Func, name string) (Func, bool) {
	i := slices.IndexFunc(fns, func(f Func) bool { return f.Name == name })
	if i < 0 {
		return Func{}, false
	}
	return fns[i], true
}
