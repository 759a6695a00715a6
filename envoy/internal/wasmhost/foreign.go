package wasmhost

import (
	"bytes"
	"compress/zlib"
	"context"
	"io"

	"google.golang.org/protobuf/encoding/protowire"

	abi "github.com/chimehq/chime/internal/proxywasmabi"
)

// foreignFunc is one proxy_call_foreign_function entry, as Envoy registers
// them (source/extensions/common/wasm/foreign.cc). It returns the result
// bytes to copy into the guest (nil: none) and a status.
type foreignFunc func(vm *vmInstance, args []byte) ([]byte, abi.Status)

// foreignFuncs are the functions Envoy's wasm extension registers that
// the chime proxy implements (docs/local-runtime.md); any other name answers NotFound,
// as cpp-host does for an unregistered one.
var foreignFuncs = map[string]foreignFunc{
	"clear_route_cache": foreignClearRouteCache,
	"compress":          foreignCompress,
	"uncompress":        foreignUncompress,
	"declare_property":  foreignDeclareProperty,
}

// maxUncompressed bounds "uncompress" output so a guest cannot make the
// host allocate without limit.
const maxUncompressed = 64 << 20

func hostCallForeign(vm *vmInstance, ctx context.Context, a []uint32) abi.Status {
	name, ok1 := vm.readString(a[0], a[1])
	args, ok2 := vm.read(a[2], a[3])
	if !ok1 || !ok2 {
		return abi.StatusInvalidMemoryAccess
	}
	fn := foreignFuncs[name]
	if fn == nil {
		return abi.StatusNotFound
	}
	out, st := fn(vm, bytes.Clone(args))
	if st != abi.StatusOK || out == nil {
		return st
	}
	return vm.copyOutStatus(ctx, out, a[4], a[5])
}

// foreignClearRouteCache makes the router re-pick the route from the
// current request headers (Context::clearRouteCache); on the root context
// it does nothing and still answers Ok.
func foreignClearRouteCache(vm *vmInstance, _ []byte) ([]byte, abi.Status) {
	if s := vm.effective(); s != nil && !s.completed {
		s.queue(s.cb.ClearRouteCache)
	}
	return nil, abi.StatusOK
}

// foreignCompress is zlib's compress(): a zlib stream at the default level.
func foreignCompress(_ *vmInstance, args []byte) ([]byte, abi.Status) {
	var b bytes.Buffer
	w := zlib.NewWriter(&b)
	if _, err := w.Write(args); err != nil {
		return nil, abi.StatusSerializationFailure
	}
	if err := w.Close(); err != nil {
		return nil, abi.StatusSerializationFailure
	}
	return b.Bytes(), abi.StatusOK
}

// foreignUncompress is zlib's uncompress(); input that is not a whole zlib
// stream is SerializationFailure.
func foreignUncompress(_ *vmInstance, args []byte) ([]byte, abi.Status) {
	r, err := zlib.NewReader(bytes.NewReader(args))
	if err != nil {
		return nil, abi.StatusSerializationFailure
	}
	out, err := io.ReadAll(io.LimitReader(r, maxUncompressed+1))
	if err != nil || len(out) > maxUncompressed {
		return nil, abi.StatusSerializationFailure
	}
	if err := r.Close(); err != nil {
		return nil, abi.StatusSerializationFailure
	}
	if out == nil {
		out = []byte{}
	}
	return out, abi.StatusOK
}

// declaredProperty is a declare_property prototype: set_property on that
// path then follows it (a readonly one can be set once per stream).
type declaredProperty struct {
	readonly bool
	typ      uint64 // WasmType: 0 Bytes, 1 String, 2 FlatBuffers, 3 Protobuf
}

// foreignDeclareProperty parses DeclarePropertyArguments (name = 1,
// readonly = 2, type = 3, schema = 4, span = 5) and files the prototype on
// the calling context. Declaring a name twice there is BadArgument, as
// Envoy keeps the first schema. set_property only consults the root
// context's prototypes, so one declared from a stream has no effect.
func foreignDeclareProperty(vm *vmInstance, args []byte) ([]byte, abi.Status) {
	name, p, ok := parseDeclareProperty(args)
	if !ok {
		return nil, abi.StatusBadArgument
	}
	m := &vm.declared
	if vm.cur != nil {
		if s := vm.streams[vm.cur.current]; s != nil {
			m = &s.declared
		}
	}
	if *m == nil {
		*m = map[string]declaredProperty{}
	}
	if _, dup := (*m)[name]; dup {
		return nil, abi.StatusBadArgument
	}
	(*m)[name] = p
	return nil, abi.StatusOK
}

func parseDeclareProperty(b []byte) (string, declaredProperty, bool) {
	var name string
	var p declaredProperty
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return "", p, false
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.BytesType:
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return "", p, false
			}
			name, n = string(v), m
		case num == 2 && typ == protowire.VarintType:
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return "", p, false
			}
			p.readonly, n = v != 0, m
		case num == 3 && typ == protowire.VarintType:
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return "", p, false
			}
			p.typ, n = v, m
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return "", p, false
			}
		}
		b = b[n:]
	}
	return name, p, true
}
