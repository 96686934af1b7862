/*
 * A stand-in libcuda for machines without an NVIDIA GPU: the driver API subset Stowage binds, with the real
 * symbols and ABI (compiled against the toolkit's cuda.h), implemented on host memory.
 *
 * - Device pointers are real host addresses (malloc'd); a device has a capacity in bytes
 *   (STOWAGE_CUDA_STANDIN_CAPACITY, read at the first cuInit; default 1 GiB) and cuMemAlloc_v2 fails with
 *   CUDA_ERROR_OUT_OF_MEMORY past it.
 * - Each created stream owns one worker thread that runs its queued operations in order (copies, event records,
 *   event waits, test delays). The NULL stream is synchronous: its work first drains every blocking stream, then
 *   runs on the calling thread, as the legacy default stream orders itself against the others.
 * - An event records a generation number; it completes when its stream's worker reaches the record.
 *   cuStreamWaitEvent queues a wait for the generation recorded at the time of the call.
 * - Every call but cuGetErrorName/cuGetErrorString returns CUDA_ERROR_NOT_INITIALIZED before cuInit.
 * - Test hooks (not driver symbols): standinInjectError makes a named call fail once with a chosen result after
 *   `countdown` further successful calls of it; standinDelayStream queues a sleep on a stream's worker, so a test
 *   can make a race deterministic; standinSetCapacity changes the device capacity.
 * - Virtual memory management and IPC are not implemented yet: those symbols are absent.
 */
#include <cuda.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define STANDIN_DEVICE_COUNT 1
#define STANDIN_DEFAULT_CAPACITY (1ull << 30)
#define STANDIN_DEVICE_NAME "Stowage stand-in CUDA device"

/* ---- global state ---- */

struct allocation {
  char *base;
  size_t bytes;
  int pinned; /* 1 for cuMemHostAlloc memory, which does not count against the device capacity */
  struct allocation *next;
};

struct CUctx_st {
  int device;
  int retains;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_initialized;
static size_t g_capacity_bytes;
static size_t g_used_bytes;
static struct allocation *g_allocations;
static struct CUctx_st g_primary[STANDIN_DEVICE_COUNT];
static __thread CUcontext t_current;

/* ---- error injection ---- */

static char g_inject_name[128];
static CUresult g_inject_result;
static int g_inject_countdown = -1;

void standinInjectError(const char *name, CUresult result, int countdown) {
  pthread_mutex_lock(&g_lock);
  strncpy(g_inject_name, name, sizeof g_inject_name - 1);
  g_inject_result = result;
  g_inject_countdown = countdown;
  pthread_mutex_unlock(&g_lock);
}

static int injected(const char *name, CUresult *result) {
  int hit = 0;
  pthread_mutex_lock(&g_lock);
  if (g_inject_countdown >= 0 && strcmp(g_inject_name, name) == 0) {
    if (g_inject_countdown == 0) {
      hit = 1;
      *result = g_inject_result;
    }
    g_inject_countdown--;
  }
  pthread_mutex_unlock(&g_lock);
  return hit;
}

#define ENTER(name)                                  \
  do {                                               \
    CUresult injected_result;                        \
    if (injected(name, &injected_result)) return injected_result; \
    if (!g_initialized) return CUDA_ERROR_NOT_INITIALIZED; \
  } while (0)

void standinSetCapacity(size_t bytes) {
  pthread_mutex_lock(&g_lock);
  g_capacity_bytes = bytes;
  pthread_mutex_unlock(&g_lock);
}

/* ---- errors ---- */

struct error_text {
  CUresult code;
  const char *name;
  const char *text;
};

static const struct error_text k_errors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static const struct error_text *find_error(CUresult code) {
  for (size_t i = 0; i < sizeof k_errors / sizeof k_errors[0]; i++)
    if (k_errors[i].code == code) return &k_errors[i];
  return NULL;
}

CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr) {
  if (pStr == NULL) return CUDA_ERROR_INVALID_VALUE;
  const struct error_text *e = find_error(error);
  *pStr = e ? e->name : NULL;
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr) {
  if (pStr == NULL) return CUDA_ERROR_INVALID_VALUE;
  const struct error_text *e = find_error(error);
  *pStr = e ? e->text : NULL;
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---- initialization and devices ---- */

CUresult CUDAAPI cuInit(unsigned int flags) {
  CUresult injected_result;
  if (injected("cuInit", &injected_result)) return injected_result;
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&g_lock);
  if (!g_initialized) {
    const char *env = getenv("STOWAGE_CUDA_STANDIN_CAPACITY");
    g_capacity_bytes = env ? (size_t)strtoull(env, NULL, 10) : STANDIN_DEFAULT_CAPACITY;
    for (int i = 0; i < STANDIN_DEVICE_COUNT; i++) g_primary[i].device = i;
    g_initialized = 1;
  }
  pthread_mutex_unlock(&g_lock);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDriverGetVersion(int *driverVersion) {
  if (driverVersion == NULL) return CUDA_ERROR_INVALID_VALUE;
  *driverVersion = CUDA_VERSION;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetCount(int *count) {
  ENTER("cuDeviceGetCount");
  if (count == NULL) return CUDA_ERROR_INVALID_VALUE;
  *count = STANDIN_DEVICE_COUNT;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal) {
  ENTER("cuDeviceGet");
  if (device == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (ordinal < 0 || ordinal >= STANDIN_DEVICE_COUNT) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

static int valid_device(CUdevice dev) { return dev >= 0 && dev < STANDIN_DEVICE_COUNT; }

CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev) {
  ENTER("cuDeviceGetAttribute");
  if (pi == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *pi = 32; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *pi = 4; break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *pi = 1; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *pi = 8; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *pi = 0; break;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: *pi = 0; break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev) {
  ENTER("cuDeviceGetName");
  if (name == NULL || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  strncpy(name, STANDIN_DEVICE_NAME, (size_t)len - 1);
  name[len - 1] = '\0';
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
  ENTER("cuDeviceTotalMem_v2");
  if (bytes == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  pthread_mutex_lock(&g_lock);
  *bytes = g_capacity_bytes;
  pthread_mutex_unlock(&g_lock);
  return CUDA_SUCCESS;
}

/* ---- contexts ---- */

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
  ENTER("cuDevicePrimaryCtxRetain");
  if (pctx == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  pthread_mutex_lock(&g_lock);
  g_primary[dev].retains++;
  pthread_mutex_unlock(&g_lock);
  *pctx = &g_primary[dev];
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  ENTER("cuDevicePrimaryCtxRelease_v2");
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  CUresult result = CUDA_SUCCESS;
  pthread_mutex_lock(&g_lock);
  if (g_primary[dev].retains == 0) result = CUDA_ERROR_INVALID_CONTEXT;
  else g_primary[dev].retains--;
  pthread_mutex_unlock(&g_lock);
  return result;
}

static int valid_context(CUcontext ctx) {
  for (int i = 0; i < STANDIN_DEVICE_COUNT; i++)
    if (ctx == &g_primary[i]) return g_primary[i].retains > 0;
  return 0;
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx) {
  ENTER("cuCtxSetCurrent");
  if (ctx != NULL && !valid_context(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  t_current = ctx;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx) {
  ENTER("cuCtxGetCurrent");
  if (pctx == NULL) return CUDA_ERROR_INVALID_VALUE;
  *pctx = t_current;
  return CUDA_SUCCESS;
}

#define REQUIRE_CONTEXT() \
  do { if (t_current == NULL || !valid_context(t_current)) return CUDA_ERROR_INVALID_CONTEXT; } while (0)

/* ---- memory ---- */

/* The allocation that holds [p, p + bytes), or NULL. Caller holds g_lock. */
static struct allocation *find_range(const void *p, size_t bytes, int pinned) {
  const char *c = p;
  for (struct allocation *a = g_allocations; a; a = a->next)
    if (a->pinned == pinned && c >= a->base && c + bytes <= a->base + a->bytes && c + bytes >= c) return a;
  return NULL;
}

static CUresult add_allocation(void **out, size_t bytes, int pinned) {
  pthread_mutex_lock(&g_lock);
  if (!pinned && bytes > g_capacity_bytes - g_used_bytes) {
    pthread_mutex_unlock(&g_lock);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  struct allocation *a = malloc(sizeof *a);
  void *base = malloc(bytes);
  if (a == NULL || base == NULL) {
    free(a);
    free(base);
    pthread_mutex_unlock(&g_lock);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  a->base = base;
  a->bytes = bytes;
  a->pinned = pinned;
  a->next = g_allocations;
  g_allocations = a;
  if (!pinned) g_used_bytes += bytes;
  pthread_mutex_unlock(&g_lock);
  *out = base;
  return CUDA_SUCCESS;
}

static CUresult remove_allocation(void *base, int pinned) {
  pthread_mutex_lock(&g_lock);
  for (struct allocation **link = &g_allocations; *link; link = &(*link)->next) {
    struct allocation *a = *link;
    if (a->base == base && a->pinned == pinned) {
      *link = a->next;
      if (!pinned) g_used_bytes -= a->bytes;
      pthread_mutex_unlock(&g_lock);
      free(a->base);
      free(a);
      return CUDA_SUCCESS;
    }
  }
  pthread_mutex_unlock(&g_lock);
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
  ENTER("cuMemAlloc_v2");
  REQUIRE_CONTEXT();
  if (dptr == NULL || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  void *p;
  CUresult r = add_allocation(&p, bytesize, 0);
  if (r == CUDA_SUCCESS) *dptr = (CUdeviceptr)(uintptr_t)p;
  return r;
}

CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr) {
  ENTER("cuMemFree_v2");
  REQUIRE_CONTEXT();
  if (dptr == 0) return CUDA_SUCCESS;
  return remove_allocation((void *)(uintptr_t)dptr, 0);
}

CUresult CUDAAPI cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes) {
  ENTER("cuMemGetInfo_v2");
  REQUIRE_CONTEXT();
  if (free_bytes == NULL || total_bytes == NULL) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&g_lock);
  *free_bytes = g_capacity_bytes > g_used_bytes ? g_capacity_bytes - g_used_bytes : 0;
  *total_bytes = g_capacity_bytes;
  pthread_mutex_unlock(&g_lock);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemHostAlloc(void **pp, size_t bytesize, unsigned int flags) {
  ENTER("cuMemHostAlloc");
  REQUIRE_CONTEXT();
  if (pp == NULL || bytesize == 0 || (flags & ~0x0Fu) != 0) return CUDA_ERROR_INVALID_VALUE;
  return add_allocation(pp, bytesize, 1);
}

CUresult CUDAAPI cuMemFreeHost(void *p) {
  ENTER("cuMemFreeHost");
  REQUIRE_CONTEXT();
  return remove_allocation(p, 1);
}

static int valid_device_range(CUdeviceptr p, size_t bytes) {
  pthread_mutex_lock(&g_lock);
  int ok = find_range((void *)(uintptr_t)p, bytes, 0) != NULL;
  pthread_mutex_unlock(&g_lock);
  return ok;
}

/* ---- streams and events ---- */

#define STREAM_MAGIC 0x5354524dU
#define EVENT_MAGIC 0x45564e54U

struct CUevent_st {
  unsigned magic;
  pthread_mutex_t lock;
  pthread_cond_t completed_cond;
  uint64_t recorded; /* generation of the latest cuEventRecord */
  uint64_t completed; /* generation the stream has reached; complete when completed == recorded */
  struct CUevent_st *next_live;
};

enum op_kind { OP_COPY, OP_RECORD, OP_WAIT, OP_DELAY };

struct op {
  enum op_kind kind;
  void *dst;
  const void *src;
  size_t bytes;
  CUevent event;
  uint64_t generation;
  unsigned delay_us;
  struct op *next;
};

struct CUstream_st {
  unsigned magic;
  unsigned flags;
  pthread_t worker;
  pthread_mutex_t lock;
  pthread_cond_t changed;
  struct op *head, *tail;
  int running; /* 1 while the worker executes an op it has taken off the queue */
  int stopping;
  struct CUstream_st *next_live;
};

static struct CUstream_st *g_streams;
static struct CUevent_st *g_events;

static int valid_stream(CUstream s) {
  int ok = 0;
  pthread_mutex_lock(&g_lock);
  for (struct CUstream_st *x = g_streams; x; x = x->next_live) ok |= x == s;
  pthread_mutex_unlock(&g_lock);
  return ok;
}

static int valid_event(CUevent e) {
  int ok = 0;
  pthread_mutex_lock(&g_lock);
  for (struct CUevent_st *x = g_events; x; x = x->next_live) ok |= x == e;
  pthread_mutex_unlock(&g_lock);
  return ok;
}

static void wait_event_generation(CUevent e, uint64_t generation) {
  pthread_mutex_lock(&e->lock);
  while (e->completed < generation) pthread_cond_wait(&e->completed_cond, &e->lock);
  pthread_mutex_unlock(&e->lock);
}

static void run_op(struct op *o) {
  switch (o->kind) {
    case OP_COPY: memmove(o->dst, o->src, o->bytes); break;
    case OP_RECORD:
      pthread_mutex_lock(&o->event->lock);
      if (o->generation > o->event->completed) o->event->completed = o->generation;
      pthread_cond_broadcast(&o->event->completed_cond);
      pthread_mutex_unlock(&o->event->lock);
      break;
    case OP_WAIT: wait_event_generation(o->event, o->generation); break;
    case OP_DELAY: {
      struct timespec ts = {o->delay_us / 1000000, (long)(o->delay_us % 1000000) * 1000};
      nanosleep(&ts, NULL);
      break;
    }
  }
}

static void *stream_worker(void *arg) {
  struct CUstream_st *s = arg;
  pthread_mutex_lock(&s->lock);
  for (;;) {
    while (s->head == NULL && !s->stopping) pthread_cond_wait(&s->changed, &s->lock);
    if (s->head == NULL) break;
    struct op *o = s->head;
    s->head = o->next;
    if (s->head == NULL) s->tail = NULL;
    s->running = 1;
    pthread_mutex_unlock(&s->lock);
    run_op(o);
    free(o);
    pthread_mutex_lock(&s->lock);
    s->running = 0;
    pthread_cond_broadcast(&s->changed);
  }
  pthread_mutex_unlock(&s->lock);
  return NULL;
}

static void drain_stream(struct CUstream_st *s) {
  pthread_mutex_lock(&s->lock);
  while (s->head != NULL || s->running) pthread_cond_wait(&s->changed, &s->lock);
  pthread_mutex_unlock(&s->lock);
}

/* The legacy NULL stream: wait for every blocking stream, then run on the calling thread. */
static void run_on_null_stream(struct op *o) {
  pthread_mutex_lock(&g_lock);
  size_t n = 0;
  for (struct CUstream_st *x = g_streams; x; x = x->next_live) n += !(x->flags & CU_STREAM_NON_BLOCKING);
  struct CUstream_st **blocking = calloc(n ? n : 1, sizeof *blocking);
  n = 0;
  for (struct CUstream_st *x = g_streams; x; x = x->next_live)
    if (!(x->flags & CU_STREAM_NON_BLOCKING)) blocking[n++] = x;
  pthread_mutex_unlock(&g_lock);
  for (size_t i = 0; i < n; i++) drain_stream(blocking[i]);
  free(blocking);
  run_op(o);
  free(o);
}

static CUresult enqueue(CUstream s, struct op o) {
  struct op *copy = malloc(sizeof *copy);
  if (copy == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  *copy = o;
  copy->next = NULL;
  if (s == NULL) {
    run_on_null_stream(copy);
    return CUDA_SUCCESS;
  }
  pthread_mutex_lock(&s->lock);
  if (s->tail) s->tail->next = copy;
  else s->head = copy;
  s->tail = copy;
  pthread_cond_broadcast(&s->changed);
  pthread_mutex_unlock(&s->lock);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamCreate(CUstream *phStream, unsigned int flags) {
  ENTER("cuStreamCreate");
  REQUIRE_CONTEXT();
  if (phStream == NULL || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING) != 0) return CUDA_ERROR_INVALID_VALUE;
  struct CUstream_st *s = calloc(1, sizeof *s);
  if (s == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  s->magic = STREAM_MAGIC;
  s->flags = flags;
  pthread_mutex_init(&s->lock, NULL);
  pthread_cond_init(&s->changed, NULL);
  if (pthread_create(&s->worker, NULL, stream_worker, s) != 0) {
    free(s);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  pthread_mutex_lock(&g_lock);
  s->next_live = g_streams;
  g_streams = s;
  pthread_mutex_unlock(&g_lock);
  *phStream = s;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamDestroy_v2(CUstream hStream) {
  ENTER("cuStreamDestroy_v2");
  if (hStream == NULL) return CUDA_ERROR_INVALID_HANDLE;
  pthread_mutex_lock(&g_lock);
  struct CUstream_st **link = &g_streams;
  while (*link && *link != hStream) link = &(*link)->next_live;
  if (*link == NULL) {
    pthread_mutex_unlock(&g_lock);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  *link = hStream->next_live;
  pthread_mutex_unlock(&g_lock);
  /* As the driver does, queued work still runs; the worker finishes it, then exits. */
  pthread_mutex_lock(&hStream->lock);
  hStream->stopping = 1;
  pthread_cond_broadcast(&hStream->changed);
  pthread_mutex_unlock(&hStream->lock);
  pthread_join(hStream->worker, NULL);
  hStream->magic = 0;
  free(hStream);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamSynchronize(CUstream hStream) {
  ENTER("cuStreamSynchronize");
  if (hStream == NULL) {
    run_on_null_stream(calloc(1, sizeof(struct op))); /* an OP_COPY of zero bytes: only the ordering */
    return CUDA_SUCCESS;
  }
  if (!valid_stream(hStream)) return CUDA_ERROR_INVALID_HANDLE;
  drain_stream(hStream);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamQuery(CUstream hStream) {
  ENTER("cuStreamQuery");
  if (hStream == NULL) return CUDA_SUCCESS;
  if (!valid_stream(hStream)) return CUDA_ERROR_INVALID_HANDLE;
  pthread_mutex_lock(&hStream->lock);
  int idle = hStream->head == NULL && !hStream->running;
  pthread_mutex_unlock(&hStream->lock);
  return idle ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult CUDAAPI cuEventCreate(CUevent *phEvent, unsigned int flags) {
  ENTER("cuEventCreate");
  REQUIRE_CONTEXT();
  if (phEvent == NULL || (flags & ~0x0Fu) != 0) return CUDA_ERROR_INVALID_VALUE;
  struct CUevent_st *e = calloc(1, sizeof *e);
  if (e == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  e->magic = EVENT_MAGIC;
  pthread_mutex_init(&e->lock, NULL);
  pthread_cond_init(&e->completed_cond, NULL);
  pthread_mutex_lock(&g_lock);
  e->next_live = g_events;
  g_events = e;
  pthread_mutex_unlock(&g_lock);
  *phEvent = e;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventDestroy_v2(CUevent hEvent) {
  ENTER("cuEventDestroy_v2");
  pthread_mutex_lock(&g_lock);
  struct CUevent_st **link = &g_events;
  while (*link && *link != hEvent) link = &(*link)->next_live;
  if (hEvent == NULL || *link == NULL) {
    pthread_mutex_unlock(&g_lock);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  *link = hEvent->next_live;
  pthread_mutex_unlock(&g_lock);
  /* The driver lets queued records and waits finish; here the struct is kept (leaked) so a queued op never
     touches freed memory. */
  hEvent->magic = 0;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream) {
  ENTER("cuEventRecord");
  if (!valid_event(hEvent)) return CUDA_ERROR_INVALID_HANDLE;
  if (hStream != NULL && !valid_stream(hStream)) return CUDA_ERROR_INVALID_HANDLE;
  pthread_mutex_lock(&hEvent->lock);
  uint64_t generation = ++hEvent->recorded;
  pthread_mutex_unlock(&hEvent->lock);
  struct op o = {.kind = OP_RECORD, .event = hEvent, .generation = generation};
  return enqueue(hStream, o);
}

CUresult CUDAAPI cuEventQuery(CUevent hEvent) {
  ENTER("cuEventQuery");
  if (!valid_event(hEvent)) return CUDA_ERROR_INVALID_HANDLE;
  pthread_mutex_lock(&hEvent->lock);
  int done = hEvent->completed >= hEvent->recorded;
  pthread_mutex_unlock(&hEvent->lock);
  return done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult CUDAAPI cuEventSynchronize(CUevent hEvent) {
  ENTER("cuEventSynchronize");
  if (!valid_event(hEvent)) return CUDA_ERROR_INVALID_HANDLE;
  pthread_mutex_lock(&hEvent->lock);
  uint64_t generation = hEvent->recorded;
  pthread_mutex_unlock(&hEvent->lock);
  wait_event_generation(hEvent, generation);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int flags) {
  ENTER("cuStreamWaitEvent");
  if (!valid_event(hEvent)) return CUDA_ERROR_INVALID_HANDLE;
  if (hStream != NULL && !valid_stream(hStream)) return CUDA_ERROR_INVALID_HANDLE;
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&hEvent->lock);
  uint64_t generation = hEvent->recorded;
  pthread_mutex_unlock(&hEvent->lock);
  struct op o = {.kind = OP_WAIT, .event = hEvent, .generation = generation};
  return enqueue(hStream, o);
}

/* Test hook: the stream's worker sleeps `microseconds` before its next queued operation. */
CUresult standinDelayStream(CUstream hStream, unsigned int microseconds) {
  if (hStream == NULL || !valid_stream(hStream)) return CUDA_ERROR_INVALID_HANDLE;
  struct op o = {.kind = OP_DELAY, .delay_us = microseconds};
  return enqueue(hStream, o);
}

/* ---- copies ---- */

static CUresult copy(CUstream s, void *dst, const void *src, size_t bytes) {
  if (s != NULL && !valid_stream(s)) return CUDA_ERROR_INVALID_HANDLE;
  struct op o = {.kind = OP_COPY, .dst = dst, .src = src, .bytes = bytes};
  return enqueue(s, o);
}

#define DEVICE(p) ((void *)(uintptr_t)(p))

CUresult CUDAAPI cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) {
  ENTER("cuMemcpyHtoD_v2");
  REQUIRE_CONTEXT();
  if (src == NULL || !valid_device_range(dst, n)) return CUDA_ERROR_INVALID_VALUE;
  return copy(NULL, DEVICE(dst), src, n);
}

CUresult CUDAAPI cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) {
  ENTER("cuMemcpyDtoH_v2");
  REQUIRE_CONTEXT();
  if (dst == NULL || !valid_device_range(src, n)) return CUDA_ERROR_INVALID_VALUE;
  return copy(NULL, dst, DEVICE(src), n);
}

CUresult CUDAAPI cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  ENTER("cuMemcpyDtoD_v2");
  REQUIRE_CONTEXT();
  if (!valid_device_range(dst, n) || !valid_device_range(src, n)) return CUDA_ERROR_INVALID_VALUE;
  return copy(NULL, DEVICE(dst), DEVICE(src), n);
}

CUresult CUDAAPI cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
  ENTER("cuMemcpyHtoDAsync_v2");
  REQUIRE_CONTEXT();
  if (src == NULL || !valid_device_range(dst, n)) return CUDA_ERROR_INVALID_VALUE;
  return copy(s, DEVICE(dst), src, n);
}

CUresult CUDAAPI cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s) {
  ENTER("cuMemcpyDtoHAsync_v2");
  REQUIRE_CONTEXT();
  if (dst == NULL || !valid_device_range(src, n)) return CUDA_ERROR_INVALID_VALUE;
  return copy(s, dst, DEVICE(src), n);
}

CUresult CUDAAPI cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  ENTER("cuMemcpyDtoDAsync_v2");
  REQUIRE_CONTEXT();
  if (!valid_device_range(dst, n) || !valid_device_range(src, n)) return CUDA_ERROR_INVALID_VALUE;
  return copy(s, DEVICE(dst), DEVICE(src), n);
}
