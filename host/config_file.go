package host

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v4"

	"github.com/chimehq/chime/ntp"
)

// The host config file (docs/configuration.md) lives here, next to Config, because its
// fields are Config's fields and its defaults are DefaultConfig; a package
// of its own would have to import host (so host tests could not use it) or
// take the defaults away from the host.

// ConfigEnv names the host config file when no --config flag is given
// (docs/configuration.md).
const ConfigEnv = "CHIME_CONFIG"

// maxConfigFileSize bounds the file; a host config is a few hundred bytes.
const maxConfigFileSize = 1 << 20

// LoadConfig builds the configuration of `chime host` and `chime up`
// (docs/configuration.md): DefaultConfig, then the config file at path (or $CHIME_CONFIG
// when path is ""), then the environment variables. Neither a path nor
// CHIME_CONFIG means the defaults; a path that does not exist is an error.
// Flags are the caller's to apply last.
func LoadConfig(path string) (Config, error) {
	if path == "" {
		path = strings.TrimSpace(os.Getenv(ConfigEnv))
	}
	cfg := DefaultConfig()
	if path != "" {
		var err error
		if cfg, err = ReadConfigFile(path); err != nil {
			return Config{}, err
		}
	}
	return applyEnv(cfg)
}

// ReadConfigFile reads one host config file over DefaultConfig, without
// the environment (`chime config check`).
func ReadConfigFile(path string) (Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return Config{}, fmt.Errorf("host config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxConfigFileSize+1))
	if err != nil {
		return Config{}, fmt.Errorf("host config %s: %w", path, err)
	}
	if len(data) > maxConfigFileSize {
		return Config{}, fmt.Errorf("host config %s: larger than %d bytes", path, maxConfigFileSize)
	}
	return ParseConfigFile(data, path)
}

// ParseConfigFile parses host config YAML over DefaultConfig. Every field
// is optional; an empty (null) value keeps the default. An unknown field, a
// value of the wrong type or a bad value is an error naming the field and
// its line, one line per problem; name is the file name in those errors.
func ParseConfigFile(data []byte, name string) (Config, error) {
	cfg := DefaultConfig()
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	switch err := dec.Decode(&doc); {
	case errors.Is(err, io.EOF): // empty or only comments
		return cfg, nil
	case err != nil:
		return Config{}, fmt.Errorf("host config %s: %w", name, err)
	}
	if err := dec.Decode(new(yaml.Node)); !errors.Is(err, io.EOF) {
		return Config{}, fmt.Errorf("host config %s: one YAML document expected", name)
	}
	idx := indexNodes(&doc)

	file := fileFromConfig(cfg)
	strict := yaml.NewDecoder(bytes.NewReader(data))
	strict.KnownFields(true)
	var errs []*FieldError
	if err := strict.Decode(&file); err != nil {
		var te *yaml.LoadErrors
		if !errors.As(err, &te) {
			return Config{}, fmt.Errorf("host config %s: %w", name, err)
		}
		for _, e := range te.Errors {
			errs = append(errs, idx.explain(name, e))
		}
	}
	// The decoder truncates 1.5 into an int field; the file must say 1.
	for path, n := range idx.values {
		tag := n.ShortTag()
		if t, ok := fileSchema[schemaPath(path)]; ok && t.Kind() == reflect.Int && n.Kind == yaml.ScalarNode && tag != "!!int" && tag != "!!null" {
			errs = append(errs, &FieldError{name, n.Line, path, fmt.Sprintf("%q is not an integer", n.Value)})
		}
	}
	if len(errs) == 0 {
		c := checker{lines: idx.lines}
		for _, s := range file.sections() {
			s.check(&c)
		}
		for _, p := range c.problems {
			errs = append(errs, &FieldError{name, idx.lines[p.path], p.path, p.msg})
		}
	}
	if len(errs) > 0 {
		slices.SortStableFunc(errs, func(a, b *FieldError) int { return a.Line - b.Line })
		var joined []error
		seen := map[FieldError]bool{} // the decoder and the integer check may agree
		for _, e := range errs {
			if !seen[*e] {
				seen[*e] = true
				joined = append(joined, e)
			}
		}
		return Config{}, errors.Join(joined...)
	}
	for _, s := range file.sections() {
		s.apply(&cfg)
	}
	return cfg, nil
}

// configFile is the file's schema. Each section is a struct with from,
// check and apply (configSection); a feature that needs settings adds its
// section as a field here and to sections(), nothing more.
type configFile struct {
	Server serverSection `yaml:",inline"`
	NTP    ntpSection    `yaml:"ntp"`
	Clock  clockSection  `yaml:"clock"`
	Holds  holdsSection  `yaml:"holds"`
	Guards guardsSection `yaml:"guards"`
	Timers timersSection `yaml:"timers"`
	Cron   cronSection   `yaml:"cron"`
	// docs/scheduler.md
	Heartbeat heartbeatSection `yaml:"heartbeat"`
	Wake      wakeSection      `yaml:"wake"`

	Delivery deliverySection `yaml:"delivery"`
}

func (f *configFile) sections() []configSection {
	return []configSection{&f.Server, &f.NTP, &f.Clock, &f.Holds, &f.Guards, &f.Timers, &f.Cron, &f.Heartbeat, &f.Wake, &f.Delivery, crossChecks{f}}
}

// configSection is one part of the file.
type configSection interface {
	// from sets the section's fields from cfg (the defaults the file
	// overrides).
	from(cfg Config)
	// check reports bad values by their field path (e.g. "holds.max").
	check(c *checker)
	// apply copies the section into cfg.
	apply(cfg *Config)
}

func fileFromConfig(cfg Config) configFile {
	var f configFile
	for _, s := range f.sections() {
		s.from(cfg)
	}
	return f
}

// serverSection holds the top-level fields.
type serverSection struct {
	// Listen is the host's HTTP address (docs/configuration.md).
	Listen string `yaml:"listen"`
	// DataDir holds the Badger database.
	DataDir string `yaml:"dataDir"`
	// Reentry is the proxy listener that followups go to when the filter
	// names none.
	Reentry string `yaml:"reentry"`
	// DashboardHosts are extra Host names for the token-less dashboard.
	DashboardHosts []string `yaml:"dashboardHosts"`
}

func (s *serverSection) from(cfg Config) {
	s.Listen, s.DataDir, s.Reentry = cfg.Addr, cfg.DataDir, cfg.Reentry
	s.DashboardHosts = slices.Clone(cfg.DashboardHosts)
}

func (s *serverSection) check(c *checker) {
	c.hostPort("listen", s.Listen, true)
	if strings.TrimSpace(s.DataDir) == "" {
		c.bad("dataDir", "must not be empty")
	}
	c.hostPort("reentry", s.Reentry, false)
	for i, h := range s.DashboardHosts {
		if h == "" || h != strings.ToLower(h) || strings.ContainsAny(h, ":/ \t[]") {
			c.bad("dashboardHosts["+strconv.Itoa(i)+"]", fmt.Sprintf("%q: want a lower-case host name without port, such as chime.internal", h))
		}
	}
}

func (s *serverSection) apply(cfg *Config) {
	cfg.Addr, cfg.DataDir, cfg.Reentry = s.Listen, s.DataDir, s.Reentry
	cfg.DashboardHosts = nil
	if len(s.DashboardHosts) > 0 {
		cfg.DashboardHosts = s.DashboardHosts
	}
}

// ntpSection is docs/time.md#ntp.
type ntpSection struct {
	Enabled    bool          `yaml:"enabled"`
	Servers    []string      `yaml:"servers"`
	StaleAfter time.Duration `yaml:"staleAfter"`
}

func (s *ntpSection) from(cfg Config) {
	s.Enabled, s.Servers, s.StaleAfter = cfg.NTP.Enabled, slices.Clone(cfg.NTP.Servers), cfg.NTP.StaleAfter
}

func (s *ntpSection) check(c *checker) {
	if len(s.Servers) == 0 {
		c.bad("ntp.servers", "must list at least one server")
	}
	for i, srv := range s.Servers {
		path := "ntp.servers[" + strconv.Itoa(i) + "]"
		if got, err := ntp.ParseServers(srv); err != nil {
			c.bad(path, err.Error())
		} else if len(got) != 1 || got[0] != srv {
			c.bad(path, fmt.Sprintf("%q: want one host or host:port per entry", srv))
		}
	}
	c.positive("ntp.staleAfter", s.StaleAfter)
}

func (s *ntpSection) apply(cfg *Config) {
	cfg.NTP.Enabled, cfg.NTP.Servers, cfg.NTP.StaleAfter = s.Enabled, s.Servers, s.StaleAfter
}

// clockSection is the clock task timing of docs/clock-tool.md.
type clockSection struct {
	DueWindow time.Duration `yaml:"dueWindow"`
	Retention time.Duration `yaml:"retention"`
}

func (s *clockSection) from(cfg Config) { s.DueWindow, s.Retention = cfg.DueWindow, cfg.Retention }

func (s *clockSection) check(c *checker) {
	c.positive("clock.dueWindow", s.DueWindow)
	c.positive("clock.retention", s.Retention)
}

func (s *clockSection) apply(cfg *Config) { cfg.DueWindow, cfg.Retention = s.DueWindow, s.Retention }

// holdsSection is docs/continuation.md#holds.
type holdsSection struct {
	Max          time.Duration `yaml:"max"`
	NonStreaming bool          `yaml:"nonStreaming"`
}

func (s *holdsSection) from(cfg Config) {
	s.Max, s.NonStreaming = cfg.HoldMax, !cfg.DisableHoldNonStreaming
}

func (s *holdsSection) check(c *checker) { c.positive("holds.max", s.Max) }

func (s *holdsSection) apply(cfg *Config) {
	cfg.HoldMax, cfg.DisableHoldNonStreaming = s.Max, !s.NonStreaming
}

// guardsSection is the followup chain guards of docs/continuation.md.
type guardsSection struct {
	MaxHops          int           `yaml:"maxHops"`
	MaxChainDuration time.Duration `yaml:"maxChainDuration"`
	FollowupTimeout  time.Duration `yaml:"followupTimeout"`
}

func (s *guardsSection) from(cfg Config) {
	s.MaxHops, s.MaxChainDuration, s.FollowupTimeout = cfg.MaxHops, cfg.MaxChainDuration, cfg.FollowupTimeout
}

func (s *guardsSection) check(c *checker) {
	if s.MaxHops < 1 {
		c.bad("guards.maxHops", fmt.Sprintf("%d: must be at least 1", s.MaxHops))
	}
	c.positive("guards.maxChainDuration", s.MaxChainDuration)
	c.positive("guards.followupTimeout", s.FollowupTimeout)
}

func (s *guardsSection) apply(cfg *Config) {
	cfg.MaxHops, cfg.MaxChainDuration, cfg.FollowupTimeout = s.MaxHops, s.MaxChainDuration, s.FollowupTimeout
}

// timersSection is docs/timers.md.
type timersSection struct {
	Enabled       bool          `yaml:"enabled"`
	MaxWait       time.Duration `yaml:"maxWait"`
	MaxPerSession int           `yaml:"maxPerSession"`
	Retention     time.Duration `yaml:"retention"`
}

func (s *timersSection) from(cfg Config) {
	s.Enabled, s.MaxWait, s.MaxPerSession, s.Retention = !cfg.DisableTimers, cfg.TimerMaxWait, cfg.TimerMaxPerSession, cfg.TimerRetention
}

func (s *timersSection) check(c *checker) {
	c.positive("timers.maxWait", s.MaxWait)
	if s.MaxPerSession < 1 {
		c.bad("timers.maxPerSession", fmt.Sprintf("%d: must be at least 1", s.MaxPerSession))
	}
	c.positive("timers.retention", s.Retention)
}

func (s *timersSection) apply(cfg *Config) {
	cfg.DisableTimers, cfg.TimerMaxWait, cfg.TimerMaxPerSession, cfg.TimerRetention = !s.Enabled, s.MaxWait, s.MaxPerSession, s.Retention
}

// crossChecks are rules between sections; it has no fields of its own.
type crossChecks struct{ f *configFile }

func (crossChecks) from(Config)   {}
func (crossChecks) apply(*Config) {}

func (x crossChecks) check(c *checker) {
	// Every hold runs inside its chain, so the chain guard would cut a
	// longer hold short: that part of holds.max could never apply.
	h, g := x.f.Holds.Max, x.f.Guards.MaxChainDuration
	switch {
	case h <= 0 || g <= 0 || h <= g:
	case c.set("holds.max"):
		c.bad("holds.max", fmt.Sprintf("%s is longer than guards.maxChainDuration %s, which bounds every hold", h, g))
	default: // the file lowered the guard below the default hold
		c.bad("guards.maxChainDuration", fmt.Sprintf("%s is shorter than holds.max %s; every hold runs inside its chain", g, h))
	}
	// A timer call is held inside its chain too.
	if w := x.f.Timers.MaxWait; w > 0 && g > 0 && w > g {
		c.bad("timers.maxWait", fmt.Sprintf("%s is longer than guards.maxChainDuration %s, which bounds every wait", w, g))
	}
}

// checker collects the problems of a decoded file.
type checker struct {
	problems []problem
	lines    map[string]int // the paths the file sets
}

// set tells whether the file sets path (rather than the default).
func (c *checker) set(path string) bool { return c.lines[path] > 0 }

type problem struct{ path, msg string }

func (c *checker) bad(path, msg string) { c.problems = append(c.problems, problem{path, msg}) }

func (c *checker) positive(path string, d time.Duration) {
	if d <= 0 {
		c.bad(path, fmt.Sprintf("%s: must be positive", d))
	}
}

// hostPort checks a host:port; port 0 is allowed where the OS may pick one.
func (c *checker) hostPort(path, v string, zeroPort bool) {
	_, port, err := net.SplitHostPort(v)
	if err != nil {
		c.bad(path, fmt.Sprintf("%q: want host:port such as 127.0.0.1:8787", v))
		return
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 || (n == 0 && !zeroPort) {
		c.bad(path, fmt.Sprintf("%q: bad port", v))
	}
}

// fileSchema maps every field path ("holds.max", "ntp.servers[]" for list
// items, "" for the root) to its Go type, for error messages.
var fileSchema = func() map[string]reflect.Type {
	m := map[string]reflect.Type{}
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		switch t.Kind() {
		case reflect.Struct:
			for i := range t.NumField() {
				f := t.Field(i)
				name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
				if opts == "inline" {
					walk(f.Type, prefix) // its fields sit at this level
					continue
				}
				m[join(prefix, name)] = f.Type
				walk(f.Type, join(prefix, name))
			}
		case reflect.Slice:
			m[prefix+"[]"] = t.Elem()
			walk(t.Elem(), prefix+"[]")
		}
	}
	root := reflect.TypeFor[configFile]()
	m[""] = root
	walk(root, "")
	return m
}()

func join(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

// listIndex turns "ntp.servers[2]" into the schema path "ntp.servers[]".
var listIndex = regexp.MustCompile(`\[\d+\]`)

func schemaPath(path string) string { return listIndex.ReplaceAllString(path, "[]") }

// nodeIndex locates the file's fields: which path each key and value node
// is at, and where each path is.
type nodeIndex struct {
	keys   map[[2]int]string // line, column of a mapping key → its path
	vals   map[[2]int]string // line, column of a value → its path
	lines  map[string]int    // path → line of its key (or list item)
	values map[string]*yaml.Node
}

func indexNodes(doc *yaml.Node) *nodeIndex {
	idx := &nodeIndex{keys: map[[2]int]string{}, vals: map[[2]int]string{}, lines: map[string]int{}, values: map[string]*yaml.Node{}}
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		idx.vals[[2]int{n.Line, n.Column}] = path
		idx.values[path] = n
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				p := join(path, k.Value)
				idx.keys[[2]int{k.Line, k.Column}] = p
				if _, seen := idx.lines[p]; !seen {
					idx.lines[p] = k.Line
				}
				walk(v, p)
			}
		case yaml.SequenceNode:
			for i, item := range n.Content {
				p := path + "[" + strconv.Itoa(i) + "]"
				idx.lines[p] = item.Line
				walk(item, p)
			}
		}
	}
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		walk(doc.Content[0], "")
	}
	return idx
}

// FieldError is one problem of a host config file: where it is and what
// is wrong. ParseConfigFile joins them, one line each.
type FieldError struct {
	File string
	Line int    // 0 when unknown
	Path string // e.g. "holds.max", "ntp.servers[1]"; "" for the whole file
	Msg  string
}

func (e *FieldError) Error() string {
	where := e.File
	if e.Line > 0 {
		where += ":" + strconv.Itoa(e.Line)
	}
	if e.Path == "" {
		return fmt.Sprintf("host config %s: %s", where, e.Msg)
	}
	return fmt.Sprintf("host config %s: %s: %s", where, e.Path, e.Msg)
}

// explain rewrites one decoder error as a FieldError.
func (idx *nodeIndex) explain(name string, e *yaml.LoadError) *FieldError {
	line := e.Mark.Line
	pos := [2]int{line, e.Mark.Column}
	if path, ok := idx.keys[pos]; ok {
		if _, known := fileSchema[schemaPath(path)]; known {
			return &FieldError{name, line, path, e.Message} // e.g. a duplicate key
		}
		// A block mapping starts where its first key does: a mapping given
		// for a scalar field is reported at that key.
		parent := parentPath(path)
		if pt, ok := fileSchema[schemaPath(parent)]; ok && pt.Kind() != reflect.Struct {
			return &FieldError{name, idx.lines[parent], parent, wantType(pt, idx.values[parent])}
		}
		return &FieldError{name, line, path, unknownField(path)}
	}
	if path, ok := idx.vals[pos]; ok {
		if t, known := fileSchema[schemaPath(path)]; known {
			return &FieldError{name, line, path, wantType(t, idx.values[path])}
		}
	}
	return &FieldError{name, line, "", e.Message}
}

func parentPath(path string) string {
	if i := strings.LastIndex(path, "."); i >= 0 {
		return path[:i]
	}
	return ""
}

func unknownField(path string) string {
	parent, prefix := parentPath(path), ""
	if parent != "" {
		prefix = schemaPath(parent) + "." // list items: delivery.sessions[0] → delivery.sessions[]
	}
	var known []string
	for p := range fileSchema {
		if rest, ok := strings.CutPrefix(p, schemaPath(prefix)); ok && rest != "" && !strings.ContainsAny(rest, ".[") {
			known = append(known, rest)
		}
	}
	slices.Sort(known)
	msg := "unknown field"
	if parent != "" {
		msg += " in " + parent
	}
	msg += "; known: " + strings.Join(known, ", ")
	switch path {
	case "static_resources", "admin", "node":
		msg += " (this looks like an Envoy bootstrap, which the proxy takes: chime up -c envoy.yaml)"
	}
	return msg
}

// wantType says what a field takes, quoting what the file has.
func wantType(t reflect.Type, n *yaml.Node) string {
	got := "this value"
	if n != nil && n.Kind == yaml.ScalarNode {
		got = strconv.Quote(n.Value)
	} else if n != nil && n.Kind == yaml.SequenceNode {
		got = "a list"
	} else if n != nil && n.Kind == yaml.MappingNode {
		got = "a mapping"
	}
	switch {
	case t == reflect.TypeFor[time.Duration]():
		return got + " is not a duration; want Go syntax such as 60s, 20m or 1h30m"
	case t.Kind() == reflect.Bool:
		return got + " is not a boolean; want true or false"
	case t.Kind() == reflect.Int:
		return got + " is not an integer"
	case t.Kind() == reflect.String:
		return got + " is not a string"
	case t.Kind() == reflect.Slice:
		return got + " is not a list; want e.g. [a, b]"
	case t.Kind() == reflect.Struct:
		return got + " is not a mapping of fields"
	}
	return got + " has the wrong type"
}
