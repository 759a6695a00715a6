package wasmhost

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"strings"
	"time"

	"github.com/tetratelabs/wazero/sys"

	abi "github.com/chimehq/chime/internal/proxywasmabi"
)

// WASI is implemented here rather than with wazero's
// imports/wasi_snapshot_preview1, because Envoy's set is small, partly
// stubbed (fd_read is ENOSYS, path_open ENOENT, ...) and must be exact per
// profile: a module importing anything else is refused at load, as Envoy
// fails to link it. Both "wasi_snapshot_preview1" and "wasi_unstable" get
// the same functions, as proxy-wasm-cpp-host registers both. The lists and
// signatures are the catalogue's (abi.WASIEnvoy138, abi.WASIFull).
//
// envoy-1.38: the 18 functions of proxy-wasm-cpp-host before its 2026-04
// "add all wasi hostcalls used by Go SDK" change (the host Envoy 1.33-1.38
// ship), where poll_oneoff answers ENOSYS (52).
//
// envoy-1.39 (and its alias envoy-latest): that change's full list, as
// Envoy 1.39.0 ships it, and poll_oneoff really waits on
// clock subscriptions (cpp-host HEAD only reports zero events; sleeping is
// what a Go guest's time.Sleep needs), giving up when the call's context
// or the factory is cancelled.
func wasiFunctions(profile string) []hostFunc {
	if profile != ProfileEnvoy139 {
		return bindAll(abi.WASIEnvoy138, wasiHandlers(false))
	}
	return bindAll(abi.WASIFull, wasiHandlers(true))
}

// wasiHandlers implements every function of abi.WASIFull; full selects
// the envoy-1.39 poll_oneoff.
func wasiHandlers(full bool) map[string]handler {
	poll := handler{words: errnoConst(errnoNosys)}
	if full {
		poll = handler{words: wasiPollOneoff}
	}
	// stdio answers fd-only calls: success on stdout/stderr, BADF otherwise.
	stdio := handler{raw: func(_ *vmInstance, _ context.Context, st []uint64) {
		if isStdio(uint32(st[0])) {
			st[0] = errnoSuccess
		} else {
			st[0] = errnoBadf
		}
	}}
	return map[string]handler{
		// envoy-1.38
		"fd_write": {words: wasiFdWrite, allowedInStart: true},
		"fd_read":  {words: errnoConst(errnoNosys)},
		"fd_seek": {raw: func(vm *vmInstance, ctx context.Context, st []uint64) {
			vm.log(ctx, abi.LogLevelError, "wasi_unstable fd_seek")
			st[0] = errnoSuccess
		}},
		"fd_close": {words: func(vm *vmInstance, ctx context.Context, _ []uint32) uint32 {
			vm.log(ctx, abi.LogLevelError, "wasi_unstable fd_close")
			return errnoSuccess
		}},
		"fd_fdstat_get":       {words: wasiFdstatGet, allowedInStart: true},
		"fd_fdstat_set_flags": {words: errnoConst(errnoNosys), allowedInStart: true},
		"environ_get":         {words: wasiEnvironGet, allowedInStart: true},
		"environ_sizes_get":   {words: wasiEnvironSizesGet, allowedInStart: true},
		"args_get":            {words: errnoConst(errnoSuccess), allowedInStart: true},
		"args_sizes_get": {words: func(vm *vmInstance, _ context.Context, a []uint32) uint32 {
			if !vm.putU32(a[0], 0) || !vm.putU32(a[1], 0) {
				return errnoFault
			}
			return errnoSuccess
		}, allowedInStart: true},
		"clock_time_get": {raw: wasiClockTimeGet, allowedInStart: true},
		"random_get":     {words: wasiRandomGet, allowedInStart: true},
		"sched_yield":    {words: errnoConst(errnoSuccess)},
		"poll_oneoff":    poll,
		"proc_exit": {raw: func(vm *vmInstance, ctx context.Context, st []uint64) {
			// Envoy logs and returns; a guest cannot continue after exit,
			// so the call ends here as a trap.
			vm.log(ctx, abi.LogLevelError, "wasi_unstable proc_exit")
			panic(sys.NewExitError(uint32(st[0])))
		}},
		"path_open":           {raw: rawErrno(errnoNoent)},
		"fd_prestat_get":      {words: errnoConst(errnoBadf), allowedInStart: true},
		"fd_prestat_dir_name": {words: errnoConst(errnoNosys), allowedInStart: true},

		// envoy-1.39 only
		"fd_filestat_get":   {raw: rawErrno(errnoBadf)},
		"path_filestat_get": {raw: rawErrno(errnoNotsup)},
		"clock_res_get": {words: func(vm *vmInstance, _ context.Context, a []uint32) uint32 {
			if a[0] > 1 {
				return errnoNotsup
			}
			if !vm.putU64(a[1], 1) {
				return errnoFault
			}
			return errnoSuccess
		}},
		"fd_advise":             {raw: rawErrno(errnoSuccess)},
		"fd_allocate":           stdio,
		"fd_datasync":           stdio,
		"fd_fdstat_set_rights":  stdio,
		"fd_filestat_set_size":  stdio,
		"fd_filestat_set_times": stdio,
		"fd_pread":              {raw: rawErrno(errnoNosys)},
		"fd_pwrite": {raw: func(vm *vmInstance, ctx context.Context, st []uint64) {
			st[0] = uint64(wasiFdWrite(vm, ctx, []uint32{uint32(st[0]), uint32(st[1]), uint32(st[2]), uint32(st[4])}))
		}},
		"fd_readdir": {raw: func(vm *vmInstance, _ context.Context, st []uint64) {
			st[0] = errnoNotdir
			if !vm.putU32(uint32(st[4]), 0) {
				st[0] = errnoFault
			}
		}},
		"fd_renumber": {words: func(_ *vmInstance, _ context.Context, a []uint32) uint32 {
			if !isStdio(a[0]) || !isStdio(a[1]) {
				return errnoBadf
			}
			return errnoNotsup
		}},
		"fd_sync": stdio,
		"fd_tell": {words: func(vm *vmInstance, _ context.Context, a []uint32) uint32 {
			if !isStdio(a[0]) {
				return errnoBadf
			}
			if !vm.putU64(a[1], 0) {
				return errnoFault
			}
			return errnoSuccess
		}},
		"path_create_directory":   {raw: rawErrno(errnoNotsup)},
		"path_filestat_set_times": {raw: rawErrno(errnoNotsup)},
		"path_link":               {raw: rawErrno(errnoNotsup)},
		"path_readlink": {words: func(vm *vmInstance, _ context.Context, a []uint32) uint32 {
			if !vm.putU32(a[5], 0) {
				return errnoFault
			}
			return errnoNotsup
		}},
		"path_remove_directory": {raw: rawErrno(errnoNotsup)},
		"path_rename":           {raw: rawErrno(errnoNotsup)},
		"path_symlink":          {raw: rawErrno(errnoNotsup)},
		"path_unlink_file":      {raw: rawErrno(errnoNotsup)},
		"sock_accept":           {raw: rawErrno(errnoNotsup)},
		"sock_recv":             {raw: rawErrno(errnoNotsup)},
		"sock_send":             {raw: rawErrno(errnoNotsup)},
		"sock_shutdown":         {raw: rawErrno(errnoNotsup)},
	}
}

func isStdio(fd uint32) bool { return fd == 1 || fd == 2 }

func errnoConst(errno uint32) func(*vmInstance, context.Context, []uint32) uint32 {
	return func(*vmInstance, context.Context, []uint32) uint32 { return errno }
}

// rawErrno answers errno whatever the parameters.
func rawErrno(errno uint32) func(*vmInstance, context.Context, []uint64) {
	return func(_ *vmInstance, _ context.Context, st []uint64) { st[0] = uint64(errno) }
}

// wasiFdWrite sends stdout to the logger at info and stderr at error, one
// entry per call with a trailing newline trimmed, as Envoy's writevImpl.
func wasiFdWrite(vm *vmInstance, ctx context.Context, a []uint32) uint32 {
	fd, iovs, n, nwritten := a[0], a[1], a[2], a[3]
	var level abi.LogLevel
	switch fd {
	case 1:
		level = abi.LogLevelInfo
	case 2:
		level = abi.LogLevelError
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
	for _, e := range vm.g.envVars {
		size += len(e) + 1
	}
	if !vm.putU32(a[0], uint32(len(vm.g.envVars))) || !vm.putU32(a[1], uint32(size)) {
		return errnoFault
	}
	return errnoSuccess
}

func wasiEnvironGet(vm *vmInstance, _ context.Context, a []uint32) uint32 {
	arr, buf := a[0], a[1]
	for _, e := range vm.g.envVars {
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

// wasiPollOneoff (envoy-1.39) waits for the earliest clock subscription
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
			case <-vm.g.ctx.Done():
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
