#include "CHaulEvent.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

// libevent 2.1's own layouts of the two structures read here (event2/keyvalq_struct.h).
struct haul_evkeyval {
    struct haul_evkeyval *next;
    struct haul_evkeyval **prev;
    char *key;
    char *value;
};
struct haul_evkeyvalq {
    struct haul_evkeyval *first;
    struct haul_evkeyval **last;
};

static struct {
    const char *(*get_version)(void);
    uint32_t (*get_version_number)(void);
    haul_event_base *(*base_new)(void);
    void (*base_free)(haul_event_base *);
    int (*base_dispatch)(haul_event_base *);
    int (*base_loopbreak)(haul_event_base *);
    haul_event *(*event_new)(haul_event_base *, int, short, void (*)(int, short, void *), void *);
    int (*event_add)(haul_event *, const void *);
    void (*request_free)(haul_evhttp_request *);
    void *(*connection_get_bufferevent)(haul_evhttp_connection *);
    haul_evbuffer *(*bufferevent_get_output)(void *);
    void (*event_free)(haul_event *);
    haul_evhttp *(*http_new)(haul_event_base *);
    void (*http_free)(haul_evhttp *);
    void *(*accept_socket_with_handle)(haul_evhttp *, int);
    void (*set_gencb)(haul_evhttp *, void (*)(haul_evhttp_request *, void *), void *);
    void (*set_max_headers_size)(haul_evhttp *, long);
    void (*set_max_body_size)(haul_evhttp *, long);
    void (*set_timeout)(haul_evhttp *, int);
    void (*set_allowed_methods)(haul_evhttp *, uint16_t);
    void (*set_default_content_type)(haul_evhttp *, const char *);
    int (*request_get_command)(haul_evhttp_request *);
    const char *(*request_get_uri)(haul_evhttp_request *);
    haul_evkeyvalq *(*request_get_input_headers)(haul_evhttp_request *);
    haul_evkeyvalq *(*request_get_output_headers)(haul_evhttp_request *);
    haul_evbuffer *(*request_get_input_buffer)(haul_evhttp_request *);
    haul_evhttp_connection *(*request_get_connection)(haul_evhttp_request *);
    void (*connection_get_peer)(haul_evhttp_connection *, char **, uint16_t *);
    void (*connection_set_closecb)(haul_evhttp_connection *, void (*)(haul_evhttp_connection *, void *), void *);
    const char *(*find_header)(const haul_evkeyvalq *, const char *);
    int (*add_header)(haul_evkeyvalq *, const char *, const char *);
    void (*send_reply)(haul_evhttp_request *, int, const char *, haul_evbuffer *);
    void (*send_reply_start)(haul_evhttp_request *, int, const char *);
    void (*send_reply_chunk)(haul_evhttp_request *, haul_evbuffer *);
    void (*send_reply_end)(haul_evhttp_request *);
    haul_evbuffer *(*buffer_new)(void);
    void (*buffer_free)(haul_evbuffer *);
    int (*buffer_add)(haul_evbuffer *, const void *, size_t);
    size_t (*buffer_get_length)(const haul_evbuffer *);
    unsigned char *(*buffer_pullup)(haul_evbuffer *, long);
} api;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static char load_error[512];
static int load_status = -1;

#define RESOLVE(field, name)                                                                    \
    do {                                                                                        \
        *(void **)(&api.field) = dlsym(lib, name);                                              \
        if (!api.field) {                                                                       \
            snprintf(load_error, sizeof load_error, "libevent lacks %s (need 2.1)", name);     \
            return;                                                                             \
        }                                                                                       \
    } while (0)

static void (*close_handler)(void *);

static void load(void) {
    static const char *candidates[] = {"libevent-2.1.so.7", "libevent-2.1.7.dylib", NULL};
    void *lib = NULL;
    for (int i = 0; candidates[i] && !lib; i++) lib = dlopen(candidates[i], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        snprintf(load_error, sizeof load_error, "cannot load libevent: %s", e ? e : "not found");
        return;
    }
    RESOLVE(get_version, "event_get_version");
    RESOLVE(get_version_number, "event_get_version_number");
    uint32_t version = api.get_version_number();
    if (version < 0x02010900 || version >= 0x02020000) {
        snprintf(load_error, sizeof load_error, "libevent %s is not 2.1.9 or a later 2.1", api.get_version());
        return;
    }
    RESOLVE(request_free, "evhttp_request_free");
    RESOLVE(connection_get_bufferevent, "evhttp_connection_get_bufferevent");
    RESOLVE(bufferevent_get_output, "bufferevent_get_output");
    RESOLVE(base_new, "event_base_new");
    RESOLVE(base_free, "event_base_free");
    RESOLVE(base_dispatch, "event_base_dispatch");
    RESOLVE(base_loopbreak, "event_base_loopbreak");
    RESOLVE(event_new, "event_new");
    RESOLVE(event_add, "event_add");
    RESOLVE(event_free, "event_free");
    RESOLVE(http_new, "evhttp_new");
    RESOLVE(http_free, "evhttp_free");
    RESOLVE(accept_socket_with_handle, "evhttp_accept_socket_with_handle");
    RESOLVE(set_gencb, "evhttp_set_gencb");
    RESOLVE(set_max_headers_size, "evhttp_set_max_headers_size");
    RESOLVE(set_max_body_size, "evhttp_set_max_body_size");
    RESOLVE(set_timeout, "evhttp_set_timeout");
    RESOLVE(set_allowed_methods, "evhttp_set_allowed_methods");
    RESOLVE(set_default_content_type, "evhttp_set_default_content_type");
    RESOLVE(request_get_command, "evhttp_request_get_command");
    RESOLVE(request_get_uri, "evhttp_request_get_uri");
    RESOLVE(request_get_input_headers, "evhttp_request_get_input_headers");
    RESOLVE(request_get_output_headers, "evhttp_request_get_output_headers");
    RESOLVE(request_get_input_buffer, "evhttp_request_get_input_buffer");
    RESOLVE(request_get_connection, "evhttp_request_get_connection");
    RESOLVE(connection_get_peer, "evhttp_connection_get_peer");
    RESOLVE(connection_set_closecb, "evhttp_connection_set_closecb");
    RESOLVE(find_header, "evhttp_find_header");
    RESOLVE(add_header, "evhttp_add_header");
    RESOLVE(send_reply, "evhttp_send_reply");
    RESOLVE(send_reply_start, "evhttp_send_reply_start");
    RESOLVE(send_reply_chunk, "evhttp_send_reply_chunk");
    RESOLVE(send_reply_end, "evhttp_send_reply_end");
    RESOLVE(buffer_new, "evbuffer_new");
    RESOLVE(buffer_free, "evbuffer_free");
    RESOLVE(buffer_add, "evbuffer_add");
    RESOLVE(buffer_get_length, "evbuffer_get_length");
    RESOLVE(buffer_pullup, "evbuffer_pullup");
    load_status = 0;
}

int haul_event_load(void (*handler)(void *), char *err, size_t errlen) {
    pthread_once(&load_once, load);
    void (*none)(void *) = NULL;
    if (load_status == 0 && handler)
        __atomic_compare_exchange_n(&close_handler, &none, handler, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    if (load_status != 0 && err && errlen) snprintf(err, errlen, "%s", load_error);
    return load_status;
}

const char *haul_event_version(void) { return api.get_version(); }
haul_event_base *haul_event_base_new(void) { return api.base_new(); }
void haul_event_base_free(haul_event_base *base) { api.base_free(base); }
int haul_event_base_dispatch(haul_event_base *base) { return api.base_dispatch(base); }
int haul_event_base_loopbreak(haul_event_base *base) { return api.base_loopbreak(base); }

haul_event *haul_event_new_reader(haul_event_base *base, int fd, void (*callback)(int, short, void *), void *arg) {
    haul_event *event = api.event_new(base, fd, HAUL_EV_READ | HAUL_EV_PERSIST, callback, arg);
    if (event && api.event_add(event, NULL) != 0) {
        api.event_free(event);
        return NULL;
    }
    return event;
}
haul_event *haul_event_new_timer(haul_event_base *base, int milliseconds, void (*callback)(int, short, void *), void *arg) {
    haul_event *event = api.event_new(base, -1, HAUL_EV_PERSIST, callback, arg);
    struct timeval every = {milliseconds / 1000, (milliseconds % 1000) * 1000};
    if (event && api.event_add(event, &every) != 0) {
        api.event_free(event);
        return NULL;
    }
    return event;
}
void haul_event_free(haul_event *event) { api.event_free(event); }

haul_evhttp *haul_evhttp_new(haul_event_base *base) {
    haul_evhttp *http = api.http_new(base);
    // No Content-Type of libevent's choosing (text/html; charset=ISO-8859-1): every reply sets its own.
    if (http) api.set_default_content_type(http, NULL);
    return http;
}
void haul_evhttp_free(haul_evhttp *http) { api.http_free(http); }
int haul_evhttp_accept_socket(haul_evhttp *http, int fd) { return api.accept_socket_with_handle(http, fd) ? 0 : -1; }
void haul_evhttp_set_gencb(haul_evhttp *http, void (*callback)(haul_evhttp_request *, void *), void *arg) {
    api.set_gencb(http, callback, arg);
}
void haul_evhttp_set_limits(haul_evhttp *http, long max_headers, long max_body, int timeout_seconds, int methods) {
    api.set_max_headers_size(http, max_headers);
    api.set_max_body_size(http, max_body);
    api.set_timeout(http, timeout_seconds);
    api.set_allowed_methods(http, (uint16_t)methods);
}

int haul_evhttp_request_command(haul_evhttp_request *req) { return api.request_get_command(req); }
const char *haul_evhttp_request_uri(haul_evhttp_request *req) { return api.request_get_uri(req); }
const char *haul_evhttp_request_header(haul_evhttp_request *req, const char *name) {
    return api.find_header(api.request_get_input_headers(req), name);
}
void haul_evhttp_request_headers(haul_evhttp_request *req, void (*each)(const char *, const char *, void *), void *arg) {
    haul_evkeyvalq *headers = api.request_get_input_headers(req);
    for (struct haul_evkeyval *h = headers ? headers->first : NULL; h; h = h->next) each(h->key, h->value, arg);
}
const unsigned char *haul_evhttp_request_body(haul_evhttp_request *req, size_t *length) {
    haul_evbuffer *buffer = api.request_get_input_buffer(req);
    *length = buffer ? api.buffer_get_length(buffer) : 0;
    return *length ? api.buffer_pullup(buffer, -1) : NULL;
}
void haul_evhttp_request_peer(haul_evhttp_request *req, char *out, size_t outlen) {
    char *address = NULL;
    uint16_t port = 0;
    haul_evhttp_connection *connection = api.request_get_connection(req);
    if (connection) api.connection_get_peer(connection, &address, &port);
    snprintf(out, outlen, "%s", address ? address : "");
}
int haul_evhttp_add_output_header(haul_evhttp_request *req, const char *name, const char *value) {
    return api.add_header(api.request_get_output_headers(req), name, value);
}
static haul_evbuffer *buffer_of(const void *bytes, size_t length) {
    haul_evbuffer *buffer = api.buffer_new();
    if (buffer && length) api.buffer_add(buffer, bytes, length);
    return buffer;
}
void haul_evhttp_send_reply(haul_evhttp_request *req, int status, const char *reason, const void *body, size_t length) {
    haul_evbuffer *buffer = buffer_of(body, length);
    api.send_reply(req, status, reason, buffer);
    if (buffer) api.buffer_free(buffer);
}
void haul_evhttp_send_reply_start(haul_evhttp_request *req, int status, const char *reason) {
    api.send_reply_start(req, status, reason);
}
void haul_evhttp_send_reply_chunk(haul_evhttp_request *req, const void *bytes, size_t length) {
    haul_evbuffer *buffer = buffer_of(bytes, length);
    if (buffer) {
        api.send_reply_chunk(req, buffer);
        api.buffer_free(buffer);
    }
}
void haul_evhttp_send_reply_end(haul_evhttp_request *req) { api.send_reply_end(req); }

static void on_close(haul_evhttp_connection *connection, void *arg) {
    (void)connection;
    void (*handler)(void *) = __atomic_load_n(&close_handler, __ATOMIC_ACQUIRE);
    if (handler && arg) handler(arg);
}

void haul_evhttp_request_on_close(haul_evhttp_request *req, void *arg) {
    haul_evhttp_connection *connection = api.request_get_connection(req);
    if (connection) api.connection_set_closecb(connection, arg ? on_close : NULL, arg);
}

void haul_evhttp_request_free_if_detached(haul_evhttp_request *req) {
    if (!api.request_get_connection(req)) api.request_free(req);
}

size_t haul_evhttp_request_unsent(haul_evhttp_request *req) {
    haul_evhttp_connection *connection = api.request_get_connection(req);
    void *bev = connection ? api.connection_get_bufferevent(connection) : NULL;
    haul_evbuffer *out = bev ? api.bufferevent_get_output(bev) : NULL;
    return out ? api.buffer_get_length(out) : 0;
}
