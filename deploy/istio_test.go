package deploy_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	extensions "istio.io/api/extensions/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"
	"sigs.k8s.io/yaml"
)

// k8sDoc is one Kubernetes object of a manifest.
type k8sDoc struct {
	apiVersion, kind, name, namespace string
	raw                               map[string]any
}

func readManifests(t *testing.T, file string) []k8sDoc {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot(), "deploy", "istio", file))
	require.NoError(t, err)
	var out []k8sDoc
	for _, part := range regexp.MustCompile(`(?m)^---$`).Split(string(raw), -1) {
		var m map[string]any
		require.NoError(t, yaml.Unmarshal([]byte(part), &m), file)
		if m == nil {
			continue
		}
		d := k8sDoc{raw: m}
		d.apiVersion, _ = m["apiVersion"].(string)
		d.kind, _ = m["kind"].(string)
		md, _ := m["metadata"].(map[string]any)
		d.name, _ = md["name"].(string)
		d.namespace, _ = md["namespace"].(string)
		require.True(t, d.apiVersion != "" && d.kind != "" && d.name != "", "%s: a document without apiVersion, kind or metadata.name", file)
		out = append(out, d)
	}
	return out
}

func find(t *testing.T, docs []k8sDoc, kind string) k8sDoc {
	t.Helper()
	for _, d := range docs {
		if d.kind == kind {
			return d
		}
	}
	t.Fatalf("no %s", kind)
	return k8sDoc{}
}

// istioSpec decodes an Istio object's spec into its API message; protojson
// refuses unknown fields and bad enum values, as Istio's validation does.
func istioSpec(t *testing.T, d k8sDoc, msg proto.Message) {
	t.Helper()
	spec, err := yaml.Marshal(d.raw["spec"])
	require.NoError(t, err)
	js, err := yaml.YAMLToJSON(spec)
	require.NoError(t, err)
	require.NoError(t, protojson.Unmarshal(js, msg), "%s %s spec", d.kind, d.name)
}

func TestIstioManifests(t *testing.T) {
	hostDocs := readManifests(t, "host.yaml")
	var wp extensions.WasmPlugin
	plugin := find(t, readManifests(t, "wasmplugin.yaml"), "WasmPlugin")
	assert.Equal(t, "extensions.istio.io/v1alpha1", plugin.apiVersion)
	istioSpec(t, plugin, &wp)

	assert.True(t, strings.HasPrefix(wp.GetUrl(), "oci://"), "chime.wasm as an OCI artifact: %s", wp.GetUrl())
	assert.Equal(t, extensions.PluginType_HTTP, wp.GetType())
	product := readYAML(t, filepath.Join(repoRoot(), "envoy.yaml"))
	assert.Equal(t, at(t, product, append(wasmConfig, "root_id")...), wp.GetPluginName(), "pluginName is the filter's root_id")
	assert.NotEmpty(t, wp.GetSelector().GetMatchLabels(), "the plugin names the workloads it runs on")

	// The filter's hostCluster is the cluster Istio builds for the Service.
	svc := find(t, hostDocs, "Service")
	port := obj(t, svc.raw, "spec", "ports", 0)
	cfg := wp.GetPluginConfig().AsMap()
	fqdn := fmt.Sprintf("%s.%s.svc.cluster.local", svc.name, svc.namespace)
	assert.Equal(t, fmt.Sprintf("outbound|%v||%s", port["port"], fqdn), cfg["hostCluster"])
	assert.Equal(t, fqdn, cfg["hostAuthority"])

	secret := find(t, hostDocs, "Secret")
	assert.Equal(t, at(t, secret.raw, "stringData", "token"), cfg["token"], "the filter's token is the host's")

	dep := find(t, hostDocs, "Deployment")
	assert.Equal(t, "apps/v1", dep.apiVersion)
	assert.EqualValues(t, 1, at(t, dep.raw, "spec", "replicas"), "one host per Badger directory (docs/scale-out.md)")
	assert.Equal(t, "Recreate", at(t, dep.raw, "spec", "strategy", "type"))
	assert.Equal(t, obj(t, svc.raw, "spec", "selector"), obj(t, dep.raw, "spec", "template", "metadata", "labels"), "the Service selects the pods")
	c := obj(t, dep.raw, "spec", "template", "spec", "containers", 0)
	cport := obj(t, c, "ports", 0)
	assert.Equal(t, port["targetPort"], cport["name"])
	assert.Equal(t, port["port"], cport["containerPort"])
	var args []string
	for _, a := range c["args"].([]any) {
		args = append(args, a.(string))
	}
	assert.Equal(t, fmt.Sprintf("0.0.0.0:%v", cport["containerPort"]), argAfter(t, args, "--addr"))
	assert.Equal(t, "host", args[0])
	for _, probe := range []string{"readinessProbe", "livenessProbe"} {
		assert.Equal(t, "/healthz", at(t, c, probe, "httpGet", "path"), probe)
	}
	envs := map[string]any{}
	for _, e := range c["env"].([]any) {
		envs[e.(map[string]any)["name"].(string)] = e
	}
	ref := obj(t, envs["CHIME_HOST_TOKEN"], "valueFrom", "secretKeyRef")
	assert.Equal(t, secret.name, ref["name"])
	assert.Contains(t, obj(t, secret.raw, "stringData"), ref["key"])
	assert.Equal(t, true, at(t, dep.raw, "spec", "template", "spec", "securityContext", "runAsNonRoot"))
	assert.EqualValues(t, 65532, at(t, dep.raw, "spec", "template", "spec", "securityContext", "runAsUser"), "the Dockerfile's USER")
	dataDir := obj(t, envs["CHIME_DATA_DIR"])["value"]
	assert.Equal(t, dataDir, at(t, c, "volumeMounts", 0, "mountPath"), "state on the volume")
}

func TestIstioExternalHost(t *testing.T) {
	docs := readManifests(t, "host-external.yaml")
	var se networking.ServiceEntry
	var dr networking.DestinationRule
	seDoc, drDoc := find(t, docs, "ServiceEntry"), find(t, docs, "DestinationRule")
	istioSpec(t, seDoc, &se)
	istioSpec(t, drDoc, &dr)
	assert.Regexp(t, `^networking\.istio\.io/v1(alpha3|beta1)?$`, seDoc.apiVersion)
	assert.Contains(t, se.GetHosts(), dr.GetHost(), "the DestinationRule applies to the ServiceEntry's host")
	require.Len(t, se.GetPorts(), 1)
	assert.EqualValues(t, 8787, se.GetPorts()[0].GetNumber())
	assert.Equal(t, networking.ServiceEntry_MESH_EXTERNAL, se.GetLocation())
	assert.Equal(t, networking.ClientTLSSettings_DISABLE, dr.GetTrafficPolicy().GetTls().GetMode())
}

// TestIstioSpecValidationCanFail: the proto check refuses a misspelt field.
func TestIstioSpecValidationCanFail(t *testing.T) {
	js := []byte(`{"url":"oci://x","pluginname":"chime"}`)
	assert.Error(t, protojson.Unmarshal(js, &extensions.WasmPlugin{}))
}
