package envoy

import (
	"context"
	"fmt"

	"github.com/chimehq/chime/envoy/internal/httpfilter"
	"github.com/chimehq/chime/envoy/internal/netfilter"
)

// buildNetworkFilters builds the wasm network filters of every TCP
// listener (a chain ending in tcp_proxy). They join the same VM groups as
// HTTP filters: a network filter and an HTTP filter with one vm_id, code
// and VM configuration share a VM per worker, as in Envoy.
func (s *Server) buildNetworkFilters(ctx context.Context, env httpfilter.Env) (map[string][]netfilter.Factory, error) {
	out := map[string][]netfilter.Factory{}
	for _, l := range s.cfg.Listeners {
		for _, wc := range l.NetworkFilters {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			f, err := newWasmFactory(wc, env)
			if err != nil {
				return nil, fmt.Errorf("envoy: listener %s: wasm network filter %s (root_id %q): %w", l.Name, wc.FilterName, wc.RootID, err)
			}
			s.factories = append(s.factories, f)
			nf, ok := f.(netfilter.Factory)
			if !ok {
				return nil, fmt.Errorf("envoy: listener %s: wasm network filter %s: this filter factory cannot run network filters", l.Name, wc.FilterName)
			}
			out[l.Name] = append(out[l.Name], nf)
		}
	}
	return out, nil
}
