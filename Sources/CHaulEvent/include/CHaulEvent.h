#ifndef CHAUL_EVENT_H
#define CHAUL_EVENT_H

// Our own declarations of the libevent 2.1 functions `haul serve`'s HTTP server uses (evhttp,
// the server inside Transmission's daemon). libevent is dlopen()ed when the server starts, so no
// other haul command loads it and building needs no headers (docs/serve.md).

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct haul_event_base haul_event_base;
typedef struct haul_evhttp haul_evhttp;
typedef struct haul_evhttp_request haul_evhttp_request;
typedef struct haul_evhttp_connection haul_evhttp_connection;
typedef struct haul_evkeyvalq haul_evkeyvalq;
typedef struct haul_evbuffer haul_evbuffer;
typedef struct haul_event haul_event;

enum {
    // enum evhttp_cmd_type
    HAUL_EVHTTP_GET = 1 << 0,
    HAUL_EVHTTP_POST = 1 << 1,
    HAUL_EVHTTP_HEAD = 1 << 2,
    HAUL_EVHTTP_PUT = 1 << 3,
    HAUL_EVHTTP_DELETE = 1 << 4,
    HAUL_EVHTTP_OPTIONS = 1 << 5,
    HAUL_EV_READ = 0x02,
    HAUL_EV_PERSIST = 0x10,
};

/// Loads libevent once (2.1.9 or a later 2.1: earlier ones crash on pipelined requests); 0 on
/// success, else -1 with the reason in `err`. The close handler is given here, once.
int haul_event_load(void (*close_handler)(void *), char *err, size_t errlen);
const char *haul_event_version(void);

haul_event_base *haul_event_base_new(void);
void haul_event_base_free(haul_event_base *base);
int haul_event_base_dispatch(haul_event_base *base);
int haul_event_base_loopbreak(haul_event_base *base);
/// A persistent read event on `fd` that calls `callback(fd, what, arg)` on the loop's thread.
haul_event *haul_event_new_reader(haul_event_base *base, int fd, void (*callback)(int, short, void *), void *arg);
/// A persistent timer calling `callback(-1, what, arg)` every `milliseconds`.
haul_event *haul_event_new_timer(haul_event_base *base, int milliseconds, void (*callback)(int, short, void *), void *arg);
void haul_event_free(haul_event *event);

haul_evhttp *haul_evhttp_new(haul_event_base *base);
void haul_evhttp_free(haul_evhttp *http);
/// Serves an already bound and listening socket (TCP or Unix); 0 on success.
int haul_evhttp_accept_socket(haul_evhttp *http, int fd);
void haul_evhttp_set_gencb(haul_evhttp *http, void (*callback)(haul_evhttp_request *, void *), void *arg);
void haul_evhttp_set_limits(haul_evhttp *http, long max_headers, long max_body, int timeout_seconds, int methods);

int haul_evhttp_request_command(haul_evhttp_request *req);
const char *haul_evhttp_request_uri(haul_evhttp_request *req);
/// The value of the first input header `name` (case-insensitive), or NULL.
const char *haul_evhttp_request_header(haul_evhttp_request *req, const char *name);
/// Calls `each(name, value, arg)` for every input header, in order.
void haul_evhttp_request_headers(haul_evhttp_request *req, void (*each)(const char *, const char *, void *), void *arg);
/// The request body: a pointer valid until the reply, and its length.
const unsigned char *haul_evhttp_request_body(haul_evhttp_request *req, size_t *length);
/// The peer's address as text ("127.0.0.1", "::1", or "" for a Unix socket).
void haul_evhttp_request_peer(haul_evhttp_request *req, char *out, size_t outlen);
int haul_evhttp_add_output_header(haul_evhttp_request *req, const char *name, const char *value);
/// Sends a whole reply with `length` bytes of body.
void haul_evhttp_send_reply(haul_evhttp_request *req, int status, const char *reason, const void *body, size_t length);
/// A streamed reply (Server-Sent Events): the head, then chunks, then the end.
void haul_evhttp_send_reply_start(haul_evhttp_request *req, int status, const char *reason);
void haul_evhttp_send_reply_chunk(haul_evhttp_request *req, const void *bytes, size_t length);
void haul_evhttp_send_reply_end(haul_evhttp_request *req);
/// Asks for the close handler (given to `haul_event_load`) with `arg` if the request's
/// connection closes; NULL clears it (before the reply ends, so a later close of a kept-alive
/// connection calls nothing).
void haul_evhttp_request_on_close(haul_evhttp_request *req, void *arg);
/// After the close handler ran: frees the request if libevent detached it from its connection
/// (a caller that left while the reply was ours to give), as libevent then leaves it to us.
void haul_evhttp_request_free_if_detached(haul_evhttp_request *req);
/// Bytes written to the request's connection and not yet sent (a reader that does not read).
size_t haul_evhttp_request_unsent(haul_evhttp_request *req);

#endif
