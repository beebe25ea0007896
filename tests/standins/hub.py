"""A local stand-in for the Hugging Face Hub's HTTP API: only the endpoints huggingface_hub 1.33.0's
`create_repo`, `upload_folder` and `upload_file` call (read in hf_api.py, _commit_api.py and
_upload_pipeline.py at that version). The Hub itself is unreachable from the test machines; the real
client is pointed here with HF_ENDPOINT / `HfApi(endpoint=...)`. Test code only: nothing under
services/ imports it.

    POST /api/repos/create                         {"name", "organization", "visibility"} -> {"url"}
    POST /api/models/{org}/{name}/preupload/{rev}  {"files": [...]} -> every file "regular" (inline in the
                                                   commit), so no LFS/Xet transfer is needed
    POST /api/models/{org}/{name}/commit/{rev}     ndjson: a header line, then one line per file
                                                   (base64 content) -> {"commitUrl", "commitOid"}
    GET  /api/whoami-v2                            the token's user, orgs and role (`user`, `orgs`, `role`)
    GET  /api/models/{org}/{name}/auth-check/write 404 RepoNotFound before the first push; 403 unless role=write
    POST /api/validate-yaml                        a README.md's metadata, checked before a commit that
                                                   adds one (create_commit): a warning when it has none

Files land under `root/<org>/<name>/`. `fail_next` makes the next N requests answer HTTP 500 (a Hub
outage), `token` makes every request without `Authorization: Bearer <token>` answer 401.

    python tests/standins/hub.py ROOT PORT [TOKEN]     (serves on 127.0.0.1)
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = r"(?P<repo>[^/]+/[^/]+)"


class HubStandin:
    def __init__(
        self,
        root: Path,
        port: int = 0,
        token: str = "",
        fail_next: int = 0,
        user: str = "standin-user",
        orgs: tuple[str, ...] = (),
        role: str = "write",
    ):
        self.root = Path(root)
        self.token = token
        # whoami-v2's answer (the token's user, orgs and role); auth-check/write is 403 unless role is write.
        self.user, self.orgs, self.role = user, orgs, role
        self.fail_next = fail_next
        self.requests: list[tuple[str, str]] = []
        self.commits: list[dict] = []
        self.created: list[dict] = []
        self._lock = threading.Lock()
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _reply(self, code: int, doc: dict, headers: dict | None = None) -> None:
                body = json.dumps(doc).encode()
                self.send_response(code)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                standin.requests.append(("GET", self.path))
                if standin.token and self.headers.get("Authorization") != f"Bearer {standin.token}":
                    return self._reply(401, {"error": "Invalid credentials in Authorization header"})
                if self.path == "/api/whoami-v2":
                    return self._reply(
                        200,
                        {
                            "type": "user",
                            "name": standin.user,
                            "orgs": [{"name": org} for org in standin.orgs],
                            "auth": {"type": "access_token", "accessToken": {"role": standin.role}},
                        },
                    )
                m = re.fullmatch(rf"/api/models/{REPO}/auth-check/write", self.path)
                if m:
                    if not (standin.root / m.group("repo")).is_dir():
                        return self._reply(404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
                    if standin.role != "write":
                        return self._reply(403, {"error": "You don't have write access to this repository"})
                    return self._reply(200, {})
                self._reply(404, {"error": "not implemented by the stand-in"})

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with standin._lock:
                    standin.requests.append(("POST", self.path))
                    if standin.fail_next > 0:
                        standin.fail_next -= 1
                        return self._reply(500, {"error": "stand-in outage"})
                if standin.token and self.headers.get("Authorization") != f"Bearer {standin.token}":
                    return self._reply(401, {"error": "Invalid credentials in Authorization header"})
                base = f"http://{self.headers.get('Host')}"
                if self.path == "/api/repos/create":
                    doc = json.loads(body)
                    standin.created.append(doc)
                    return self._reply(200, {"url": f"{base}/{doc['organization']}/{doc['name']}"})
                if self.path == "/api/validate-yaml":
                    content = json.loads(body)["content"]
                    has_meta = re.match(r"---\n.*?\n---\n", content, re.S) is not None
                    warnings = [] if has_meta else [{"message": "empty or missing yaml metadata in repo card"}]
                    return self._reply(200, {"errors": [], "warnings": warnings})
                m = re.fullmatch(rf"/api/models/{REPO}/preupload/(?P<rev>[^/?]+)", self.path)
                if m:
                    files = json.loads(body)["files"]
                    return self._reply(
                        200,
                        {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in files]},
                    )
                m = re.fullmatch(rf"/api/models/{REPO}/commit/(?P<rev>[^/?]+)", self.path)
                if m:
                    return self._commit(m.group("repo"), body, base)
                self._reply(404, {"error": f"the stand-in does not serve {self.path}"})

            def _commit(self, repo: str, body: bytes, base: str):
                lines = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
                header = next(x["value"] for x in lines if x["key"] == "header")
                written = []
                for item in lines:
                    if item["key"] != "file":
                        continue
                    value = item["value"]
                    path = standin.root / repo / value["path"]
                    if ".." in Path(value["path"]).parts:
                        return self._reply(400, {"error": "bad path"})
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(base64.b64decode(value["content"]))
                    written.append(value["path"])
                oid = hashlib.sha1(body).hexdigest()
                standin.commits.append({"repo": repo, "summary": header.get("summary"), "files": written})
                self._reply(200, {"commitUrl": f"{base}/{repo}/commit/{oid}", "commitOid": oid})

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> HubStandin:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


if __name__ == "__main__":
    standin = HubStandin(Path(sys.argv[1]), int(sys.argv[2]), token=sys.argv[3] if len(sys.argv) > 3 else "")
    print(f"hub stand-in on {standin.url}, files under {standin.root}", flush=True)
    standin.server.serve_forever()
