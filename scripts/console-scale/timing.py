"""First render of console pages in headless Chromium, over WebDriver (chromedriver):
prints one JSON line per visit with the navigation timing, the first contentful paint and the
bytes transferred (page and assets).

Usage: timing.py BASE_URL COOKIE_JAR PATH...   (COOKIE_JAR: a curl cookie jar of a signed-in
session, e.g. from `curl -c jar -H "Origin: BASE_URL" -d username=… -d password=… BASE_URL/login`)
"""
import json, subprocess, sys, time, urllib.request, http.cookiejar, socket

base, jar_path, urls = sys.argv[1], sys.argv[2], sys.argv[3:]
port = 9555
drv = subprocess.Popen(["/usr/bin/chromedriver", f"--port={port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
time.sleep(1.5)
W = f"http://127.0.0.1:{port}"
def call(method, path, body=None):
    req = urllib.request.Request(W + path, method=method, data=None if body is None else json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req, timeout=120).read())["value"]
try:
    caps = {"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": {"binary": "/usr/bin/chromium", "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000", "--disable-dev-shm-usage"]}}}}
    sid = call("POST", "/session", caps)["sessionId"]
    call("POST", f"/session/{sid}/url", {"url": base + "/login"})
    jar = http.cookiejar.MozillaCookieJar(jar_path); jar.load(ignore_discard=True, ignore_expires=True)
    for c in jar:
        call("POST", f"/session/{sid}/cookie", {"cookie": {"name": c.name, "value": c.value, "path": c.path or "/"}})
    script = """const n = performance.getEntriesByType('navigation')[0];
      const fcp = performance.getEntriesByName('first-contentful-paint')[0];
      const res = performance.getEntriesByType('resource');
      return {ttfb: Math.round(n.responseStart), response_end: Math.round(n.responseEnd), dom_content_loaded: Math.round(n.domContentLoadedEventEnd),
              load: Math.round(n.loadEventEnd), first_contentful_paint: fcp ? Math.round(fcp.startTime) : null,
              html_bytes: n.transferSize, html_decoded: n.decodedBodySize, assets: res.length, asset_bytes: res.reduce((a, r) => a + r.transferSize, 0),
              asset_decoded: res.reduce((a, r) => a + r.decodedBodySize, 0)};"""
    for u in urls:
        for rep in range(3):
            call("POST", f"/session/{sid}/url", {"url": base + u})
            time.sleep(0.3)
            r = call("POST", f"/session/{sid}/execute/sync", {"script": script, "args": []})
            r["url"] = u; r["visit"] = rep + 1
            print(json.dumps(r))
    call("DELETE", f"/session/{sid}")
finally:
    drv.kill()
