package host

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// dashboardIDRoutes are the dashboard routes with ids in the path, as
// method and a path with {id} (the session), {x} (a timer, job or
// delivery id) and {a} (an action).
var dashboardIDRoutes = []struct{ method, path string }{
	{http.MethodGet, "/api/sessions/{id}/timers"},
	{http.MethodPost, "/api/sessions/{id}/timers/{x}/{a}"},
	{http.MethodGet, "/api/sessions/{id}/jobs"},
	{http.MethodGet, "/api/sessions/{id}/jobs/{x}"},
	{http.MethodDelete, "/api/sessions/{id}/jobs/{x}"},
	{http.MethodPost, "/api/sessions/{id}/jobs/{x}/{a}"},
	{http.MethodGet, "/api/sessions/{id}/heartbeat"},
	{http.MethodDelete, "/api/sessions/{id}/heartbeat"},
	{http.MethodGet, "/api/sessions/{id}/runs"},
	{http.MethodGet, "/api/sessions/{id}/events"},
	{http.MethodGet, "/api/sessions/{id}/deliveries"},
	{http.MethodPost, "/api/sessions/{id}/deliveries/{x}/retry"},
	{http.MethodGet, "/api/sessions/{id}/history"},
}

// FuzzDashboardPathIDs: every id a dashboard path carries (session, timer,
// job, delivery, action) is untrusted (issue 17, defect 7): any of them
// gets a 2xx, 3xx (the mux cleaning a path) or 4xx with a JSON body, never
// a 5xx or a panic.
func FuzzDashboardPathIDs(f *testing.F) {
	fx := newFixture(f)
	rec, err := fx.svc.timers.Create("sess-1", "build", time.Hour)
	if err != nil {
		f.Fatal(err)
	}
	r := fx.do(f, "POST", "/api/sessions/sess-1/jobs", testToken, JobCreate{Name: "standup", Schedule: "0 9 * * 1-5", TZ: "UTC", Text: "x", Target: "isolated"})
	if r.Code != http.StatusCreated {
		f.Fatalf("create job: %d %s", r.Code, r.Body)
	}
	var job struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(r.Body.Bytes(), &job)
	for i := range dashboardIDRoutes {
		for _, s := range [][3]string{
			{"sess-1", rec.TimerID, "pause"}, {"sess-1", job.ID, "run"}, {"sess-1", "d_x", "stop"},
			{"..", "..", "."}, {"a/b", "%00", "x?y=1"}, {"~abc", strings.Repeat("j", 300), ""}, {"", "", ""},
		} {
			f.Add(byte(i), s[0], s[1], s[2])
		}
	}
	f.Fuzz(func(t *testing.T, route byte, sid, id, action string) {
		rt := dashboardIDRoutes[int(route)%len(dashboardIDRoutes)]
		path := strings.NewReplacer("{id}", url.PathEscape(sid), "{x}", url.PathEscape(id), "{a}", url.PathEscape(action)).Replace(rt.path)
		req := newRequest(rt.method, path, nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		got := serve(fx.svc, req)
		switch {
		case got.Code >= 500:
			t.Fatalf("%s %s: %d %s", rt.method, path, got.Code, got.Body)
		case got.Code == http.StatusNoContent || got.Code/100 == 3:
		case !json.Valid(got.Body.Bytes()):
			t.Fatalf("%s %s: %d with a non-JSON body %q", rt.method, path, got.Code, got.Body)
		}
	})
}
