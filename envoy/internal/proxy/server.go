// Package proxy is the HTTP data plane of the chime proxy: Envoy's HTTP
// connection manager, router and cluster manager semantics over net/http,
// driving httpfilter.Filter chains per stream (docs/local-runtime.md).
package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chimehq/chime/envoy/internal/config"
	"github.com/chimehq/chime/envoy/internal/httpfilter"
	"github.com/chimehq/chime/envoy/internal/netfilter"
	"github.com/chimehq/chime/envoy/internal/stats"
)

// Options configure Listen.
type Options struct {
	Config   *config.Config
	Clusters *Clusters
	// Filters holds, per listener name, one factory per entry of that
	// listener's HTTPFilters (config order). The router is implicit.
	Filters map[string][]httpfilter.Factory
	// NetworkFilters holds, per TCP listener name (one whose chain ends in
	// tcp_proxy), one factory per entry of its NetworkFilters.
	NetworkFilters map[string][]netfilter.Factory
	// Workers is the number of worker slots connections are spread over
	// (StreamInfo.Worker, for VM affinity). Default 1.
	Workers int
	Stats   *stats.Store
	Logger  *slog.Logger
}

// Server is the set of running listeners.
type Server struct {
	listeners []*listener
	tcp       []*tcpListener
	wg        sync.WaitGroup // Serve loops
	streams   sync.WaitGroup // running streams
	ctx       context.Context
	cancel    context.CancelFunc // aborts every stream on Close
}

type workerKey struct{}
type connIDKey struct{}

var connIDs atomic.Uint64

type listener struct {
	cfg        *config.Listener
	clusters   *Clusters
	factories  []httpfilter.Factory
	log        *slog.Logger
	ln         net.Listener
	srv        *http.Server
	workers    int
	nextWorker atomic.Uint64
	streams    *sync.WaitGroup

	rqTotal          httpfilter.Metric
	rqActive         httpfilter.Metric
	rqClass          [6]httpfilter.Metric
	rqBeforeComplete httpfilter.Metric // downstream_rq_response_before_rq_complete
}

// Listen binds every listener and starts serving. It returns once all are
// accepting connections.
func Listen(opt Options) (*Server, error) {
	if opt.Config == nil || opt.Clusters == nil {
		return nil, errors.New("proxy: Config and Clusters are required")
	}
	if opt.Workers < 1 {
		opt.Workers = 1
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.Stats == nil {
		opt.Stats = stats.New()
	}
	s := &Server{}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	for _, lc := range opt.Config.Listeners {
		if lc.TCPProxy != nil {
			if err := s.listenTCP(lc, opt); err != nil {
				s.Close()
				return nil, err
			}
			continue
		}
		facs := opt.Filters[lc.Name]
		if len(facs) != len(lc.HTTPFilters) {
			s.Close()
			return nil, fmt.Errorf("proxy: listener %s has %d http filters but %d factories", lc.Name, len(lc.HTTPFilters), len(facs))
		}
		ln, err := net.Listen("tcp", lc.Address())
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("proxy: listener %s: %w", lc.Name, err)
		}
		l := &listener{cfg: lc, clusters: opt.Clusters, factories: facs, log: opt.Logger, ln: ln, workers: opt.Workers, streams: &s.streams}
		tag := stats.Tag{Name: "envoy_http_conn_manager_prefix", Value: lc.StatPrefix}
		pre := "http." + lc.StatPrefix + "."
		l.rqTotal = opt.Stats.Counter(pre+"downstream_rq_total", "http.downstream_rq_total", tag)
		l.rqActive = opt.Stats.Gauge(pre+"downstream_rq_active", "http.downstream_rq_active", tag)
		l.rqBeforeComplete = opt.Stats.Counter(pre+"downstream_rq_response_before_rq_complete", "http.downstream_rq_response_before_rq_complete", tag)
		for c := 1; c <= 5; c++ {
			l.rqClass[c] = opt.Stats.Counter(pre+"downstream_rq_"+strconv.Itoa(c)+"xx", "http.downstream_rq_xx",
				stats.Tag{Name: "envoy_response_code_class", Value: strconv.Itoa(c)}, tag)
		}
		l.srv = &http.Server{
			Handler:           l,
			ReadHeaderTimeout: time.Minute,
			IdleTimeout:       time.Hour, // Envoy's default HCM idle_timeout
			ErrorLog:          slog.NewLogLogger(opt.Logger.Handler(), slog.LevelDebug),
			BaseContext:       func(net.Listener) context.Context { return s.ctx },
			ConnContext: func(ctx context.Context, c net.Conn) context.Context {
				if wc, ok := c.(*wireConn); ok {
					ctx = context.WithValue(ctx, wireConnKey{}, wc)
				}
				w := int((l.nextWorker.Add(1) - 1) % uint64(l.workers))
				ctx = context.WithValue(ctx, connIDKey{}, connIDs.Add(1))
				return context.WithValue(ctx, workerKey{}, w)
			},
			// Envoy's default max_request_headers_kb: 60 KiB of headers, else
			// 431 (docs/failures.md). net/http allows MaxHeaderBytes plus 4 KiB.
			MaxHeaderBytes: maxRequestHeaderBytes - 4<<10,
		}
		s.listeners = append(s.listeners, l)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			_ = l.srv.Serve(wireListener{ln})
		}()
	}
	return s, nil
}

// maxRequestHeaderBytes is Envoy's default HCM max_request_headers_kb.
const maxRequestHeaderBytes = 60 << 10

// Addr returns the bound address of the named listener ("" if unknown).
func (s *Server) Addr(name string) string {
	for _, l := range s.listeners {
		if l.cfg.Name == name {
			return l.ln.Addr().String()
		}
	}
	for _, l := range s.tcp {
		if l.cfg.Name == name {
			return l.ln.Addr().String()
		}
	}
	return ""
}

// Names lists the listener names in config order.
func (s *Server) Names() []string {
	var out []string
	for _, l := range s.listeners {
		out = append(out, l.cfg.Name)
	}
	for _, l := range s.tcp {
		out = append(out, l.cfg.Name)
	}
	return out
}

// Close stops accepting, aborts open streams and waits for them to finish
// (so filters are done with before their factories are closed).
func (s *Server) Close() error {
	s.cancel()
	for _, l := range s.listeners {
		_ = l.srv.Close()
	}
	for _, l := range s.tcp {
		l.close()
	}
	s.wg.Wait()
	s.streams.Wait()
	return nil
}

func (l *listener) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.streams.Add(1)
	defer l.streams.Done()
	l.rqTotal.Add(1)
	l.rqActive.Add(1)
	newStream(l, w, r).run()
}

func (l *listener) countResponse(code int) {
	if c := code / 100; c >= 1 && c <= 5 {
		l.rqClass[c].Add(1)
	}
}

func sortStrings(s []string) { sort.Strings(s) }

// listenTCP binds a listener whose chain ends in tcp_proxy (tcp.go).
func (s *Server) listenTCP(lc *config.Listener, opt Options) error {
	if len(opt.NetworkFilters[lc.Name]) != len(lc.NetworkFilters) {
		return fmt.Errorf("proxy: listener %s has %d network filters but %d factories", lc.Name, len(lc.NetworkFilters), len(opt.NetworkFilters[lc.Name]))
	}
	ln, err := net.Listen("tcp", lc.Address())
	if err != nil {
		return fmt.Errorf("proxy: listener %s: %w", lc.Name, err)
	}
	l := newTCPListener(s.ctx, lc, opt, ln)
	s.tcp = append(s.tcp, l)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		l.serve()
	}()
	return nil
}
