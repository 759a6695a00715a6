package wasmhost

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"strings"
	"time"

	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"
)

// WASI is implemented here rather than with wazero's
// imports/wasi_snapshot_preview1, because Envoy's set is small, partly
// stubbed (fd_read is ENOSYS, path_open ENOENT, ...) and must be exact per
// profile: a module importing anything else is refused at load, as Envoy
// fails to link it. Both "wasi_snapshot_preview1" and "wasi_unstable" get
// the same functions, as proxy-wasm-cpp-host registers both.
//
// envoy-1.38: the 18 functions of proxy-wasm-cpp-host before its 2026-04
// "add all wasi hostcalls used by Go SDK" change (the host Envoy 1.33-1.38
// ship), where poll_oneoff answers ENOSYS (52).
//
// envoy-latest: that change's full list, and poll_oneoff really waits on
// clock subscriptions (cpp-host HEAD only reports zero events; sleeping is
// what a Go guest's time.Sleep needs), giving up when the call's context
// or the factory is cancelled.
func wasiFunctions(profile string) []hostFunc {
	fns := []hostFunc{
		wasiFn("fd_write", 4, true, wasiFdWrite),
		wasiFn("fd_read", 4, false, errnoConst(errnoNosys)),
		{name: "fd_seek", params: []api.ValueType{i32, i64, i32, i32}, results: i32s(1), fn: func(vm *vmInstance, ctx context.Context, st []uint64) {
			vm.log(ctx, 4, "wasi_unstable fd_seek")
			st[0] = errnoSuccess
		}},
		wasiFn("fd_close", 1, false, func(vm *vmInstance, ctx context.Context, _ []uint32) uint32 {
			vm.log(ctx, 4, "wasi_unstable fd_close")
			return errnoSuccess
		}),
		wasiFn("fd_fdstat_get", 2, true, wasiFdstatGet),
		wasiFn("fd_fdstat_set_flags", 2, true, errnoConst(errnoNosys)),
		wasiFn("environ_get", 2, true, wasiEnvironGet),
		wasiFn("environ_sizes_get", 2, true, wasiEnvironSizesGet),
		wasiFn("args_get", 2, true, errnoConst(errnoSuccess)),
		wasiFn("args_sizes_get", 2, true, func(vm *vmInstance, _ context.Context, a []uint32) uint32 {
			if !vm.putU32(a[0], 0) || !vm.putU32(a[1], 0) {
				return errnoFault
			}
			return errnoSuccess
		}),
		{name: "clock_time_get", params: []api.ValueType{i32, i64, i32}, results: i32s(1), allowedInStart: true, fn: wasiClockTimeGet},
		wasiFn("random_get", 2, true, wasiRandomGet),
		wasiFn("sched_yield", 0, false, errnoConst(errnoSuccess)),
		{name: "proc_exit", params: i32s(1), fn: func(vm *vmInstance, ctx context.Context, st []uint64) {
			// Envoy logs and returns; a guest cannot continue after exit,
			// so the call ends here as a trap.
			vm.log(ctx, 4, "wasi_unstable proc_exit")
			panic(sys.NewExitError(uint32(st[0])))
		}},
		{name: "path_open", params: []api.ValueType{i32, i32, i32, i32, i32, i64, i64, i32, i32}, results: i32s(1), fn: func(_ *vmInstance, _ context.Context, st []uint64) {
			st[0] = errnoNoent
		}},
		wasiFn("fd_prestat_get", 2, true, errnoConst(errnoBadf)),
		wasiFn("fd_prestat_dir_name", 3, true, errnoConst(errnoNosys)),
	}
	if profile != ProfileEnvoyLatest {
		fns = append(fns, wasiFn("poll_oneoff", 4, false, errnoConst(errnoNosys)))
		return fns
	}
	stdio := func(a []uint32) uint32 {
		if a[0] != 1 && a[0] != 2 {
			return errnoBadf
		}
		return errnoSuccess
	}
	stdioFn := func(name string, params ...api.ValueType) hostFunc {
		return hostFunc{name: name, params: params, results: i32s(1), fn: func(_ *vmInstance, _ context.Context, st []uint64) {
			st[0] = uint64(stdio([]uint32{uint32(st[0])}))
		}}
	}
	constFn := func(name string, errno uint32, params ...api.ValueType) hostFunc {
		return hostFunc{name: name, params: params, results: i32s(1), fn: func(_ *vmInstance, _ context.Context, st []uint64) {
			st[0] = uint64(errno)
		}}
	}
	return append(fns,
		wasiFn("poll_oneoff", 4, false, wasiPollOneoff),
		constFn("fd_filestat_get", errnoBadf, i32, i32),
		constFn("path_filestat_get", errnoNotsup, i32, i32, i32, i32, i32),
		wasiFn("clock_res_get", 2, false, func(vm *vmInstance, _ context.Context, a []uint32) uint32 {
			if a[0] > 1 {
				return errnoNotsup
			}
			if !vm.putU64(a[1], 1) {
				return errnoFault
			}
			return errnoSuccess
		}),
		constFn("fd_advise", errnoSuccess, i32, i64, i64, i32),
		stdioFn("fd_allocate", i32, i64, i64),
		stdioFn("fd_datasync", i32),
		stdioFn("fd_fdstat_set_rights", i32, i64, i64),
		stdioFn("fd_filestat_set_size", i32, i64),
		stdioFn("fd_filestat_set_times", i32, i64, i64, i32),
		constFn("fd_pread", errnoNosys, i32, i32, i32, i64, i32),
		hostFunc{name: "fd_pwrite", params: []api.ValueType{i32, i32, i32, i64, i32}, results: i32s(1), fn: func(vm *vmInstance, ctx context.Context, st []uint64) {
			st[0] = uint64(wasiFdWrite(vm, ctx, []uint32{uint32(st[0]), uint32(st[1]), uint32(st[2]), uint32(st[4])}))
		}},
		wasiFn("fd_readdir", 5, false, func(vm *vmInstance, _ context.Context, a []uint32) uint32 {
			if !vm.putU32(a[4], 0) {
				return errnoFault
			}
			return errnoNotdir
		}),
		wasiFn("fd_renumber", 2, false, func(_ *vmInstance, _ context.Context, a []uint32) uint32 {
			if stdio(a[:1]) != 0 || stdio(a[1:]) != 0 {
				return errnoBadf
			}
			return errnoNotsup
		}),
		stdioFn("fd_sync", i32),
		wasiFn("fd_tell", 2, false, func(vm *vmInstance, _ context.Context, a []uint32) uint32 {
			if stdio(a) != 0 {
				return errnoBadf
			}
			if !vm.putU64(a[1], 0) {
				return errnoFault
			}
			return errnoSuccess
		}),
		constFn("path_create_directory", errnoNotsup, i32, i32, i32),
		constFn("path_filestat_set_times", errnoNotsup, i32, i32, i32, i32, i64, i64, i32),
		constFn("path_link", errnoNotsup, i32, i32, i32, i32, i32, i32, i32),
		wasiFn("path_readlink", 6, false, func(vm *vmInstance, _ context.Context, a []uint32) uint32 {
			if !vm.putU32(a[5], 0) {
				return errnoFault
			}
			return errnoNotsup
		}),
		constFn("path_remove_directory", errnoNotsup, i32, i32, i32),
		constFn("path_rename", errnoNotsup, i32, i32, i32, i32, i32, i32),
		constFn("path_symlink", errnoNotsup, i32, i32, i32, i32, i32),
		constFn("path_unlink_file", errnoNotsup, i32, i32, i32),
		constFn("sock_accept", errnoNotsup, i32, i32, i32),
		constFn("sock_recv", errnoNotsup, i32, i32, i32, i32, i32, i32),
		constFn("sock_send", errnoNotsup, i32, i32, i32, i32, i32),
		constFn("sock_shutdown", errnoNotsup, i32, i32),
	)
}

func wasiFn(name string, n int, allowedInStart bool, fn func(vm *vmInstance, ctx context.Context, a []uint32) uint32) hostFunc {
	return hostFunc{name: name, params: i32s(n), results: i32s(1), allowedInStart: allowedInStart, fn: func(vm *vmInstance, ctx context.Context, stack []uint64) {
		a := make([]uint32, n)
		for i := range a {
			a[i] = uint32(stack[i])
		}
		stack[0] = uint64(fn(vm, ctx, a))
	}}
}

func errnoConst(errno uint32) func(*vmInstance, context.Context, []uint32) uint32 {
	return func(*vmInstance, context.Context, []uint32) uint32 { return errno }
}

// wasiFdWrite sends stdout to the logger at info and stderr at error, one
// entry per call with a trailing newline trimmed, as Envoy's writevImpl.
func wasiFdWrite(vm *vmInstance, ctx context.Context, a []uint32) uint32 {
	fd, iovs, n, nwritten := a[0], a[1], a[2], a[3]
	var level uint32
	switch fd {
	case 1:
		level = 2
	case 2:
		level = 4
	default:
		return errnoBadf
	}
	var sb strings.Builder
	for i := uint32(0); i < n; i++ {
		iov, ok := vm.read(iovs+i*8, 8)
		if !ok {
			return errnoFault
		}
		buf, size := binary.LittleEndian.Uint32(iov), binary.LittleEndian.Uint32(iov[4:])
		if size == 0 {
			continue
		}
		b, ok := vm.read(buf, size)
		if !ok {
			return errnoFault
		}
		sb.Write(b)
	}
	s := sb.String()
	if len(s) > 0 {
		vm.log(ctx, level, strings.TrimSuffix(s, "\n"))
	}
	if !vm.putU32(nwritten, uint32(len(s))) {
		return errnoFault
	}
	return errnoSuccess
}

// wasiFdstatGet: only stdout/stderr exist, with the fd_write right.
func wasiFdstatGet(vm *vmInstance, _ context.Context, a []uint32) uint32 {
	if a[0] != 1 && a[0] != 2 {
		return errnoBadf
	}
	var stat [24]byte
	binary.LittleEndian.PutUint64(stat[8:], 64) // fs_rights_base = FD_WRITE
	vm.mod.Memory().Write(a[1], stat[:])
	return errnoSuccess
}

func wasiEnvironSizesGet(vm *vmInstance, _ context.Context, a []uint32) uint32 {
	size := 0
	for _, e := range vm.f.envVars {
		size += len(e) + 1
	}
	if !vm.putU32(a[0], uint32(len(vm.f.envVars))) || !vm.putU32(a[1], uint32(size)) {
		return errnoFault
	}
	return errnoSuccess
}

func wasiEnvironGet(vm *vmInstance, _ context.Context, a []uint32) uint32 {
	arr, buf := a[0], a[1]
	for _, e := range vm.f.envVars {
		if !vm.putU32(arr, buf) || !vm.mod.Memory().Write(buf, append([]byte(e), 0)) {
			return errnoFault
		}
		arr += 4
		buf += uint32(len(e) + 1)
	}
	return errnoSuccess
}

var monoStart = time.Now()

func wasiClockTimeGet(vm *vmInstance, _ context.Context, st []uint64) {
	var t uint64
	switch uint32(st[0]) {
	case 0:
		t = uint64(time.Now().UnixNano())
	case 1:
		t = uint64(time.Since(monoStart).Nanoseconds())
	default:
		st[0] = errnoNotsup
		return
	}
	if !vm.putU64(uint32(st[2]), t) {
		st[0] = errnoFault
		return
	}
	st[0] = errnoSuccess
}

func wasiRandomGet(vm *vmInstance, _ context.Context, a []uint32) uint32 {
	if a[1] > wasiMaxRandomGet {
		return errnoInval
	}
	if a[1] == 0 {
		return errnoSuccess
	}
	b := make([]byte, a[1])
	_, _ = rand.Read(b)
	if !vm.mod.Memory().Write(a[0], b) {
		return errnoFault
	}
	return errnoSuccess
}

// wasiPollOneoff (envoy-latest) waits for the earliest clock subscription
// and reports every clock subscription due by then; fd subscriptions get an
// immediate BADF event (there are no readable files). The wait ends early
// when the calling stream or the factory is cancelled: the call is then
// aborted like a trap (the VM is replaced), since a guest runtime would
// simply poll again.
func wasiPollOneoff(vm *vmInstance, ctx context.Context, a []uint32) uint32 {
	in, out, nsub, neventsPtr := a[0], a[1], a[2], a[3]
	if nsub == 0 {
		return errnoInval
	}
	subs, ok := vm.read(in, nsub*48)
	if !ok {
		return errnoFault
	}
	subs = append([]byte(nil), subs...)
	type clockSub struct {
		userdata uint64
		deadline time.Time
	}
	now := time.Now()
	var clocks []clockSub
	var events []byte
	event := func(userdata uint64, errno uint16, typ byte) {
		var e [32]byte
		binary.LittleEndian.PutUint64(e[0:], userdata)
		binary.LittleEndian.PutUint16(e[8:], errno)
		e[10] = typ
		events = append(events, e[:]...)
	}
	for i := uint32(0); i < nsub; i++ {
		s := subs[i*48 : i*48+48]
		userdata, tag := binary.LittleEndian.Uint64(s), s[8]
		switch tag {
		case 0: // clock
			id, timeout, flags := binary.LittleEndian.Uint32(s[16:]), binary.LittleEndian.Uint64(s[24:]), binary.LittleEndian.Uint16(s[40:])
			var deadline time.Time
			switch {
			case flags&1 == 0:
				deadline = now.Add(time.Duration(timeout))
			case id == 0:
				deadline = time.Unix(0, int64(timeout))
			default:
				deadline = monoStart.Add(time.Duration(timeout))
			}
			clocks = append(clocks, clockSub{userdata, deadline})
		case 1, 2: // fd_read, fd_write
			event(userdata, errnoBadf, tag)
		default:
			event(userdata, errnoInval, tag)
		}
	}
	if len(events) == 0 && len(clocks) > 0 {
		earliest := clocks[0].deadline
		for _, c := range clocks[1:] {
			if c.deadline.Before(earliest) {
				earliest = c.deadline
			}
		}
		if d := time.Until(earliest); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				// A guest runtime would just poll again (Go does), so a
				// cancelled wait aborts the call instead, as a trap.
				t.Stop()
				panic(fmt.Errorf("poll_oneoff: wait cancelled: %w", ctx.Err()))
			case <-vm.f.ctx.Done():
				t.Stop()
				panic(fmt.Errorf("poll_oneoff: wait cancelled: filter factory closed"))
			}
		}
		now = time.Now()
		for _, c := range clocks {
			if !c.deadline.After(now) {
				event(c.userdata, errnoSuccess, 0)
			}
		}
		if len(events) == 0 {
			event(clocks[0].userdata, errnoSuccess, 0)
		}
	}
	if !vm.mod.Memory().Write(out, events) || !vm.putU32(neventsPtr, uint32(len(events)/32)) {
		return errnoFault
	}
	return errnoSuccess
}
