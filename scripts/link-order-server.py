# The server scripts/link-order.sh records haul's runs against: the files of one directory
# (argv[1]) on 127.0.0.1, an unused port (printed as "port N"), with what a real server such as
# nginx sends and haul acts on: an ETag and a Last-Modified, Accept-Ranges, and one byte range
# (`Range: bytes=a-b`, `bytes=a-`, `bytes=-n`, with If-Range) as a 206. Python's own
# http.server has none of these, so a run recorded against it would miss the code of resumable
# and split downloads.
import email.utils, http.server, os, sys

root = sys.argv[1]


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_HEAD(self):
        self.reply(body=False)

    def do_GET(self):
        self.reply(body=True)

    def reply(self, body):
        path = os.path.join(root, os.path.basename(self.path.split("?")[0]))
        try:
            with open(path, "rb") as f:
                data = f.read()
            mtime = os.stat(path).st_mtime
        except OSError:
            self.send_error(404)
            return
        etag = f'"{len(data):x}-{int(mtime):x}"'
        start, end, status = 0, len(data) - 1, 200
        asked = self.headers.get("Range", "")
        if asked.startswith("bytes=") and "," not in asked and self.headers.get("If-Range", etag) == etag:
            first, _, last = asked[len("bytes="):].partition("-")
            try:
                if first:
                    start, end = int(first), min(int(last), end) if last else end
                else:
                    start = max(0, len(data) - int(last))
            except ValueError:
                start = len(data)
            if start > end:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            status = 206
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(end - start + 1))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", etag)
        self.send_header("Last-Modified", email.utils.formatdate(mtime, usegmt=True))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
        self.end_headers()
        if body:
            self.wfile.write(data[start:end + 1])


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(f"port {server.server_address[1]}", flush=True)
server.serve_forever()
