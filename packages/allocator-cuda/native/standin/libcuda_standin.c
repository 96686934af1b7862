/*
 * A stand-in libcuda for machines without an NVIDIA GPU: the driver API subset Stowage binds, with the real
 * symbols and ABI (compiled against the toolkit's cuda.h, or against cuda_fallback.h when there is none),
 * implemented on host memory.
 *
 * - Devices: STOWAGE_CUDA_STANDIN_DEVICES of them (read at the first cuInit; default 2, at most 16), each with its
 *   own primary context and its own capacity in bytes (STOWAGE_CUDA_STANDIN_CAPACITY, the same for every device;
 *   default 1 GiB). cuMemGetInfo_v2 reports the current context's device. Allocations past a device's capacity
 *   fail with CUDA_ERROR_OUT_OF_MEMORY.
 * - Device memory (cuMemAlloc_v2) is POSIX shared memory: blocks of one sparse object per process (and per copy of
 *   this library in it), /stowage-cuda-<pid>-<instance>-heap, mapped once MAP_SHARED|MAP_NORESERVE (Note [Shared
 *   device memory]); a legacy IPC handle carries the pid, the instance, the block's offset and its size. Pages are
 *   lazy: untouched pages take no memory, so a capacity far above the machine's RAM works as long as the caller
 *   does not touch the bytes; cuMemFree_v2 gives the touched ones back (MADV_REMOVE).
 * - Virtual memory management: cuMemAddressReserve maps PROT_NONE|MAP_NORESERVE address space; cuMemCreate makes a
 *   physical allocation (counted against its device's capacity): a memfd of its own when it may be exported as a
 *   POSIX file descriptor, else a range of one pooled memfd (Note [Physical pool]); cuMemMap maps it MAP_SHARED|MAP_FIXED into
 *   a reservation, still PROT_NONE, so access faults until cuMemSetAccess makes it read-write, as on the driver;
 *   cuMemUnmap puts the PROT_NONE reservation back; the memory returns to the capacity once the allocation is
 *   released (every handle) and no longer mapped. The granularity is 2 MiB (minimum and recommended). A POSIX file
 *   descriptor export is a dup of the memfd; an import of one, in any process, is a new handle to the same memory
 *   (not counted again). cuMemRetainAllocationHandle gives one more handle to the allocation mapped at an address;
 *   cuMemGetAddressRange_v2 gives the cuMemAlloc_v2 allocation, IPC-opened allocation or mapping holding a pointer.
 * - Legacy IPC: a CUipcMemHandle names a cuMemAlloc_v2 allocation's shared memory (the whole allocation: the driver
 *   gives the handle for the allocation's base); cuIpcOpenMemHandle_v2 maps it in another process. Events created
 *   with CU_EVENT_INTERPROCESS keep their state (a process-shared mutex, condition and generation counters) in
 *   shared memory /stowage-cuda-<pid>-<instance>-e<serial>, so a record in one process is seen by a query or wait
 *   in another. Opening either kind of handle in the process that exported it fails with
 *   CUDA_ERROR_INVALID_CONTEXT.
 * - cuInit removes /dev/shm names of this scheme whose process is gone (a crashed test leaves them behind); a
 *   process unlinks its own heap when it exits normally.
 * - Each created stream owns one worker thread that runs its queued operations in order (copies, event records,
 *   event waits, test delays). The NULL stream is synchronous: its work first drains every blocking stream, then
 *   runs on the calling thread, as the legacy default stream orders itself against the others. Streams and events
 *   remember the device of the context current when they were created.
 * - An event records a generation number; it completes when its stream's worker reaches the record.
 *   cuStreamWaitEvent queues a wait for the generation recorded at the time of the call.
 * - Every call but cuGetErrorName/cuGetErrorString/cuDriverGetVersion returns CUDA_ERROR_NOT_INITIALIZED before
 *   cuInit.
 * - Test hooks (not driver symbols): standinInjectError makes a named call fail once with a chosen result after
 *   `countdown` further successful calls of it; standinDelayStream queues a sleep on a stream's worker, so a test
 *   can make a race deterministic; standinSetCapacity changes every device's capacity, standinSetDeviceCapacity one
 *   device's; standinLiveEvents counts the events not yet destroyed (a leak shows in it).
 */
#define _GNU_SOURCE
#ifdef STOWAGE_CUDA_FALLBACK_HEADER
#include "cuda_fallback.h"
#else
#include <cuda.h>
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

// Note [Shared device memory]
// Legacy IPC needs another process to map the same bytes, given only a 64-byte handle, so device memory is named
// POSIX shared memory. One object per allocation (shm_open, ftruncate, mmap, close; munmap, shm_unlink) costs about
// 27 us per cuMemAlloc_v2+cuMemFree_v2 pair on a 2-core VM, mostly the system calls and munmap's TLB shootdowns,
// and the caching allocator's benchmarks time that pair. Instead each process creates one sparse object (up to
// 16 TiB, never touched as a whole) at its first cuMemAlloc_v2 and maps it once; an allocation is a block of it:
// - Block sizes are powers of two from 4 KiB; a block of 2^k bytes sits at an offset that is a multiple of 2^k,
//   so the block holding an interior pointer is found by rounding its offset down to each class size and looking
//   the result up (g_blocks, open addressing by base).
// - Freed blocks go on a stack per class and are handed out again; the heap grows only when that stack is empty.
//   Rounding wastes address space (at most half of each block), not memory.
// - cuMemFree_v2 gives the pages back to the system with madvise(MADV_REMOVE) (about 1.5 us) when the block may
//   have been touched: a copy went through it, or it was exported by cuIpcGetMemHandle. Otherwise, and always in
//   cuMemAlloc_v2, no system call is made: the pair costs about 0.15 us in C (getpid, a system call on glibc, is
//   not called either). The importing process maps [offset, offset + bytes) of /stowage-cuda-<pid>-<instance>-heap.

#define STANDIN_MAX_DEVICES 16
#define STANDIN_DEFAULT_DEVICES 2
#define STANDIN_DEFAULT_CAPACITY (1ull << 30)
#define STANDIN_DEVICE_NAME "Stowage stand-in CUDA device"
#define STANDIN_GRANULARITY ((size_t)2 << 20) /* bytes; VMM minimum and recommended granularity */
#define SHM_PREFIX "stowage-cuda-"
#define IPC_MEM_MAGIC 0x53434d48U   /* 'SCMH' */
#define IPC_EVENT_MAGIC 0x53434548U /* 'SCEH' */

/* ---- global state ---- */

enum region_kind {
  REGION_DEVICE,     /* cuMemAlloc_v2: named shared memory */
  REGION_PINNED,     /* cuMemHostAlloc: malloc'd, not counted against a device */
  REGION_IPC_OPENED, /* cuIpcOpenMemHandle_v2: another process's allocation, mapped here */
};

struct region {
  enum region_kind kind;
  char *base;
  size_t bytes;
  int device;
  pid_t owner;        /* the process that allocated it (REGION_DEVICE: this one) */
  uint64_t instance;  /* the library copy in `owner` that allocated it (library_instance there) */
  uint64_t serial;    /* with owner, the shared memory name */
  int opens;          /* REGION_IPC_OPENED: cuIpcOpenMemHandle_v2 calls not yet closed */
  int touched;        /* REGION_DEVICE: 1 once a copy or an IPC handle may have brought its pages in */
  struct region *next;
};

/* A physical allocation (cuMemCreate or an import). Freed when handles == 0 and mappings == 0. */
struct physical {
  int fd;             /* memfd holding the bytes; -1 for one in the physical pool (Note [Physical pool]) */
  size_t pool_offset; /* where its bytes start in the pool, when fd is -1 */
  size_t bytes;
  int device;
  int counted;        /* 1 when its bytes count against the device's capacity (made here by cuMemCreate) */
  int exportable;     /* requested CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR */
  int handles;        /* cuMemCreate/import/retain minus cuMemRelease */
  int mappings;       /* live cuMemMap ranges */
  struct physical *next;
};

/* A cuMemMap range: [base, base + bytes) shows [offset, offset + bytes) of `phys`. */
struct mapping {
  char *base;
  size_t bytes;
  struct physical *phys;
  size_t offset;
  int prot;           /* PROT_NONE until cuMemSetAccess */
  struct mapping *next;
};

struct reservation {
  char *base;
  size_t bytes;
  struct reservation *next;
};

struct CUctx_st {
  int device;
  int retains;
};

struct device {
  size_t capacity_bytes;
  size_t used_bytes;
  struct CUctx_st primary;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_initialized;
static int g_device_count;
static struct device g_devices[STANDIN_MAX_DEVICES];
static struct region *g_regions;
static struct physical *g_physicals;
static struct mapping *g_mappings;
static struct reservation *g_reservations;
static uint64_t g_serial;
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
  for (int i = 0; i < STANDIN_MAX_DEVICES; i++) g_devices[i].capacity_bytes = bytes;
  pthread_mutex_unlock(&g_lock);
}

/* Test hook: one device's capacity. CUDA_ERROR_INVALID_DEVICE for an ordinal out of range. */
CUresult standinSetDeviceCapacity(int device, size_t bytes) {
  if (device < 0 || device >= STANDIN_MAX_DEVICES) return CUDA_ERROR_INVALID_DEVICE;
  pthread_mutex_lock(&g_lock);
  g_devices[device].capacity_bytes = bytes;
  pthread_mutex_unlock(&g_lock);
  return CUDA_SUCCESS;
}

/* Takes `bytes` of `device`'s capacity, or returns 0. Caller holds g_lock. */
static int take_capacity(int device, size_t bytes) {
  struct device *d = &g_devices[device];
  if (bytes > d->capacity_bytes || d->used_bytes > d->capacity_bytes - bytes) return 0;
  d->used_bytes += bytes;
  return 1;
}

/* ---- errors ---- */

struct error_text {
  CUresult code;
  const char *name;
  const char *text;
};

/* The names and texts are the real driver's cuGetErrorName/cuGetErrorString results. */
static const struct error_text k_errors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_MAP_FAILED, "CUDA_ERROR_MAP_FAILED", "mapping of buffer object failed"},
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

/* ---- shared memory names ---- */

/* This copy of the library (a process may load two, e.g. the stand-in built on either header): the address of one
   of its statics. Shared memory names and IPC handles carry it with the pid, so two copies never share a name. */
static uint64_t library_instance(void) { return (uint64_t)(uintptr_t)&g_lock; }

/* /stowage-cuda-<pid>-<instance>-<kind><serial>: an interprocess event's state. */
static void shm_name(char *out, size_t size, pid_t pid, uint64_t instance, char kind, uint64_t serial) {
  snprintf(out, size, "/" SHM_PREFIX "%ld-%llx-%c%llu", (long)pid, (unsigned long long)instance, kind, (unsigned long long)serial);
}

/* Unlinks /dev/shm/stowage-cuda-<pid>-* of processes that no longer exist. */
static void remove_stale_shared_memory(void) {
  DIR *dir = opendir("/dev/shm");
  if (dir == NULL) return;
  for (struct dirent *entry; (entry = readdir(dir)) != NULL;) {
    if (strncmp(entry->d_name, SHM_PREFIX, strlen(SHM_PREFIX)) != 0) continue;
    char *end;
    long pid = strtol(entry->d_name + strlen(SHM_PREFIX), &end, 10);
    if (pid <= 0 || *end != '-') continue;
    if (kill((pid_t)pid, 0) == -1 && errno == ESRCH) {
      char name[300];
      snprintf(name, sizeof name, "/%s", entry->d_name);
      shm_unlink(name);
    }
  }
  closedir(dir);
}

/* ---- initialization and devices ---- */

CUresult CUDAAPI cuInit(unsigned int flags) {
  CUresult injected_result;
  if (injected("cuInit", &injected_result)) return injected_result;
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&g_lock);
  if (!g_initialized) {
    const char *capacity = getenv("STOWAGE_CUDA_STANDIN_CAPACITY");
    const char *devices = getenv("STOWAGE_CUDA_STANDIN_DEVICES");
    int count = devices ? atoi(devices) : STANDIN_DEFAULT_DEVICES;
    g_device_count = count < 1 ? 1 : count > STANDIN_MAX_DEVICES ? STANDIN_MAX_DEVICES : count;
    for (int i = 0; i < STANDIN_MAX_DEVICES; i++) {
      g_devices[i].capacity_bytes = capacity ? (size_t)strtoull(capacity, NULL, 10) : STANDIN_DEFAULT_CAPACITY;
      g_devices[i].primary.device = i;
    }
    remove_stale_shared_memory();
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
  *count = g_device_count;
  return CUDA_SUCCESS;
}

static int valid_device(CUdevice dev) { return dev >= 0 && dev < g_device_count; }

CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal) {
  ENTER("cuDeviceGet");
  if (device == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

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
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: *pi = 1; break;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: *pi = 1; break;
    case CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED: *pi = 1; break;
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
  *bytes = g_devices[dev].capacity_bytes;
  pthread_mutex_unlock(&g_lock);
  return CUDA_SUCCESS;
}

/* ---- contexts ---- */

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
  ENTER("cuDevicePrimaryCtxRetain");
  if (pctx == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  pthread_mutex_lock(&g_lock);
  g_devices[dev].primary.retains++;
  pthread_mutex_unlock(&g_lock);
  *pctx = &g_devices[dev].primary;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  ENTER("cuDevicePrimaryCtxRelease_v2");
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  CUresult result = CUDA_SUCCESS;
  pthread_mutex_lock(&g_lock);
  if (g_devices[dev].primary.retains == 0) result = CUDA_ERROR_INVALID_CONTEXT;
  else g_devices[dev].primary.retains--;
  pthread_mutex_unlock(&g_lock);
  return result;
}

static int valid_context(CUcontext ctx) {
  for (int i = 0; i < g_device_count; i++)
    if (ctx == &g_devices[i].primary) return g_devices[i].primary.retains > 0;
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

/* ---- device memory (cuMemAlloc_v2), pinned host memory ---- */

/* ---- the device heap: Note [Shared device memory] ---- */

#define HEAP_MIN_CLASS 12     /* log2 of the smallest block (a page) */
#define HEAP_CLASSES 48       /* block sizes 2^12 .. 2^47 bytes */
#define HEAP_MAX_BYTES ((size_t)16 << 40)
#define HEAP_MIN_BYTES ((size_t)64 << 30)
#define PAGE_BYTES ((size_t)4096)

struct offset_stack {
  size_t *items;
  size_t count, capacity;
};

static char *g_heap;                                  /* NULL until the first cuMemAlloc_v2 */
static pid_t g_heap_pid;                              /* the process that created (and unlinks) it */
static size_t g_heap_bytes;                           /* its (sparse) size */
static size_t g_heap_top;                             /* offset past the highest block ever handed out */
static struct offset_stack g_free_blocks[HEAP_CLASSES]; /* [k]: offsets of free blocks of 2^k bytes */
static struct region **g_blocks;                      /* open addressing by base: the live cuMemAlloc_v2 blocks */
static size_t g_block_slots, g_block_count;

/* /stowage-cuda-<pid>-<instance>-heap: the device heap. */
static void heap_name(char *out, size_t size, pid_t pid, uint64_t instance) {
  snprintf(out, size, "/" SHM_PREFIX "%ld-%llx-heap", (long)pid, (unsigned long long)instance);
}

/* Creates and maps this process's heap. Caller holds g_lock. */
static int ensure_heap(void) {
  if (g_heap != NULL) return 1;
  char name[128];
  heap_name(name, sizeof name, getpid(), library_instance());
  shm_unlink(name); /* a leftover of an earlier process with this pid */
  int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return 0;
  for (size_t bytes = HEAP_MAX_BYTES; bytes >= HEAP_MIN_BYTES && g_heap == NULL; bytes /= 2) {
    if (ftruncate(fd, (off_t)bytes) != 0) continue;
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    if (p == MAP_FAILED) continue;
    g_heap = p;
    g_heap_bytes = bytes;
    g_heap_pid = getpid();
  }
  close(fd);
  if (g_heap == NULL) shm_unlink(name);
  return g_heap != NULL;
}

__attribute__((destructor)) static void unlink_heap(void) {
  if (g_heap == NULL || g_heap_pid != getpid()) return;
  char name[128];
  heap_name(name, sizeof name, g_heap_pid, library_instance());
  shm_unlink(name);
}

static size_t block_slot(const char *base) {
  uint64_t x = (uint64_t)(uintptr_t)base >> HEAP_MIN_CLASS;
  return (size_t)((x * 0x9E3779B97F4A7C15ull) >> 20) & (g_block_slots - 1);
}

static struct region *block_at(const char *base) {
  if (g_block_count == 0) return NULL;
  for (size_t i = block_slot(base);; i = (i + 1) & (g_block_slots - 1)) {
    if (g_blocks[i] == NULL) return NULL;
    if (g_blocks[i]->base == base) return g_blocks[i];
  }
}

static int add_block(struct region *r) {
  if ((g_block_count + 1) * 2 > g_block_slots) {
    size_t old_slots = g_block_slots;
    struct region **old = g_blocks;
    size_t slots = old_slots ? old_slots * 2 : 1024;
    struct region **fresh = calloc(slots, sizeof *fresh);
    if (fresh == NULL) return 0;
    g_blocks = fresh;
    g_block_slots = slots;
    for (size_t i = 0; i < old_slots; i++)
      if (old[i] != NULL) {
        size_t j = block_slot(old[i]->base);
        while (g_blocks[j] != NULL) j = (j + 1) & (slots - 1);
        g_blocks[j] = old[i];
      }
    free(old);
  }
  size_t i = block_slot(r->base);
  while (g_blocks[i] != NULL) i = (i + 1) & (g_block_slots - 1);
  g_blocks[i] = r;
  g_block_count++;
  return 1;
}

/* Removes the block at `base` (present), shifting later entries of its probe run back. */
static void remove_block(const char *base) {
  size_t mask = g_block_slots - 1, i = block_slot(base);
  while (g_blocks[i]->base != base) i = (i + 1) & mask;
  g_blocks[i] = NULL;
  g_block_count--;
  for (size_t j = (i + 1) & mask; g_blocks[j] != NULL; j = (j + 1) & mask) {
    size_t home = block_slot(g_blocks[j]->base);
    int stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
    if (stays) continue;
    g_blocks[i] = g_blocks[j];
    g_blocks[j] = NULL;
    i = j;
  }
}

/* The live block holding the byte at p. Blocks of 2^k bytes sit at offsets that are multiples of 2^k, so the
   block holding p, if any, starts at p's offset rounded down to one of the class sizes. */
static struct region *block_holding(const char *p) {
  if (g_heap == NULL || p < g_heap || p >= g_heap + g_heap_top) return NULL;
  size_t offset = (size_t)(p - g_heap);
  for (int k = HEAP_MIN_CLASS; k < HEAP_CLASSES && ((size_t)1 << (k - 1)) <= g_heap_top; k++) {
    size_t base = offset & ~(((size_t)1 << k) - 1);
    struct region *r = block_at(g_heap + base);
    if (r != NULL && offset < base + r->bytes) return r;
  }
  return NULL;
}

static int block_class(size_t bytes) {
  int k = HEAP_MIN_CLASS;
  while (k < HEAP_CLASSES && ((size_t)1 << k) < bytes) k++;
  return k;
}

/* The offset of a free block of class k, or (size_t)-1 when the heap is full. Caller holds g_lock. */
static size_t take_block(int k) {
  struct offset_stack *free_blocks = &g_free_blocks[k];
  if (free_blocks->count > 0) return free_blocks->items[--free_blocks->count];
  size_t size = (size_t)1 << k;
  size_t offset = (g_heap_top + size - 1) & ~(size - 1);
  if (offset > g_heap_bytes || size > g_heap_bytes - offset) return (size_t)-1;
  g_heap_top = offset + size;
  return offset;
}

static int give_block(int k, size_t offset) {
  struct offset_stack *free_blocks = &g_free_blocks[k];
  if (free_blocks->count == free_blocks->capacity) {
    size_t capacity = free_blocks->capacity ? free_blocks->capacity * 2 : 64;
    size_t *items = realloc(free_blocks->items, capacity * sizeof *items);
    if (items == NULL) return 0;
    free_blocks->items = items;
    free_blocks->capacity = capacity;
  }
  free_blocks->items[free_blocks->count++] = offset;
  return 1;
}

/* ---- device memory (cuMemAlloc_v2), pinned host memory ---- */

/* The region of one of `kinds` (a bit mask of 1 << kind) that holds [p, p + bytes) (the byte at p when bytes is 0),
   or NULL. Caller holds g_lock. */
static struct region *find_region(const void *p, size_t bytes, unsigned kinds) {
  const char *c = p;
  if (bytes == 0) bytes = 1;
  if (c + bytes < c) return NULL;
  if (kinds & (1u << REGION_DEVICE)) {
    struct region *r = block_holding(c);
    if (r != NULL && c + bytes <= r->base + r->bytes) return r;
  }
  for (struct region *r = g_regions; r; r = r->next)
    if ((kinds & (1u << r->kind)) && c >= r->base && c + bytes <= r->base + r->bytes) return r;
  return NULL;
}

#define KIND(k) (1u << (k))
#define DEVICE_KINDS (KIND(REGION_DEVICE) | KIND(REGION_IPC_OPENED))

/* Pinned and IPC-opened regions live in a list; cuMemAlloc_v2 blocks in g_blocks. */
static void link_region(struct region *r) {
  r->next = g_regions;
  g_regions = r;
}

/* Removes `r` from the list. Caller holds g_lock. */
static void unlink_region(struct region *r) {
  for (struct region **link = &g_regions; *link; link = &(*link)->next)
    if (*link == r) {
      *link = r->next;
      return;
    }
}

/* Maps [offset, offset + bytes) of the named shared memory object, creating it (sized `bytes`, offset 0) when
   `create`. NULL on failure. */
static void *map_shared(const char *name, size_t offset, size_t bytes, int create) {
  int fd = shm_open(name, create ? O_RDWR | O_CREAT | O_EXCL : O_RDWR, 0600);
  if (fd < 0) return NULL;
  if (create && ftruncate(fd, (off_t)bytes) != 0) {
    close(fd);
    shm_unlink(name);
    return NULL;
  }
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, (off_t)offset);
  close(fd);
  if (p == MAP_FAILED) {
    if (create) shm_unlink(name);
    return NULL;
  }
  return p;
}

CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
  ENTER("cuMemAlloc_v2");
  REQUIRE_CONTEXT();
  if (dptr == NULL || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  int device = t_current->device;
  struct region *r = malloc(sizeof *r);
  if (r == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  pthread_mutex_lock(&g_lock);
  int k = block_class(bytesize);
  size_t offset = k < HEAP_CLASSES && ensure_heap() && take_capacity(device, bytesize) ? take_block(k) : (size_t)-2;
  if (offset == (size_t)-1) g_devices[device].used_bytes -= bytesize; /* the heap is full */
  if (offset >= (size_t)-2) {
    pthread_mutex_unlock(&g_lock);
    free(r);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *r = (struct region){.kind = REGION_DEVICE, .base = g_heap + offset, .bytes = bytesize, .device = device,
                       .owner = g_heap_pid, .instance = library_instance(), .serial = ++g_serial};
  if (!add_block(r)) {
    give_block(k, offset);
    g_devices[device].used_bytes -= bytesize;
    pthread_mutex_unlock(&g_lock);
    free(r);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  pthread_mutex_unlock(&g_lock);
  *dptr = (CUdeviceptr)(uintptr_t)r->base;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr) {
  ENTER("cuMemFree_v2");
  REQUIRE_CONTEXT();
  if (dptr == 0) return CUDA_SUCCESS;
  char *base = (char *)(uintptr_t)dptr;
  pthread_mutex_lock(&g_lock);
  struct region *r = block_at(base);
  if (r == NULL) {
    pthread_mutex_unlock(&g_lock);
    return CUDA_ERROR_INVALID_VALUE;
  }
  remove_block(base);
  g_devices[r->device].used_bytes -= r->bytes;
  /* Gives the pages back before the block can be handed out again (Note [Shared device memory]). */
  if (r->touched) madvise(base, (r->bytes + PAGE_BYTES - 1) & ~(PAGE_BYTES - 1), MADV_REMOVE);
  give_block(block_class(r->bytes), (size_t)(base - g_heap));
  pthread_mutex_unlock(&g_lock);
  free(r);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes) {
  ENTER("cuMemGetInfo_v2");
  REQUIRE_CONTEXT();
  if (free_bytes == NULL || total_bytes == NULL) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&g_lock);
  struct device *d = &g_devices[t_current->device];
  *free_bytes = d->capacity_bytes > d->used_bytes ? d->capacity_bytes - d->used_bytes : 0;
  *total_bytes = d->capacity_bytes;
  pthread_mutex_unlock(&g_lock);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemHostAlloc(void **pp, size_t bytesize, unsigned int flags) {
  ENTER("cuMemHostAlloc");
  REQUIRE_CONTEXT();
  if (pp == NULL || bytesize == 0 || (flags & ~0x0Fu) != 0) return CUDA_ERROR_INVALID_VALUE;
  struct region *r = malloc(sizeof *r);
  void *base = malloc(bytesize);
  if (r == NULL || base == NULL) {
    free(r);
    free(base);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *r = (struct region){.kind = REGION_PINNED, .base = base, .bytes = bytesize};
  pthread_mutex_lock(&g_lock);
  link_region(r);
  pthread_mutex_unlock(&g_lock);
  *pp = base;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemFreeHost(void *p) {
  ENTER("cuMemFreeHost");
  REQUIRE_CONTEXT();
  pthread_mutex_lock(&g_lock);
  struct region *r = find_region(p, 0, KIND(REGION_PINNED));
  if (r == NULL || r->base != (char *)p) {
    pthread_mutex_unlock(&g_lock);
    return CUDA_ERROR_INVALID_VALUE;
  }
  unlink_region(r);
  pthread_mutex_unlock(&g_lock);
  free(r->base);
  free(r);
  return CUDA_SUCCESS;
}

/* ---- virtual memory management ---- */

static int granular(size_t n) { return n % STANDIN_GRANULARITY == 0; }

static struct physical *find_physical(CUmemGenericAllocationHandle handle) {
  for (struct physical *p = g_physicals; p; p = p->next)
    if ((CUmemGenericAllocationHandle)(uintptr_t)p == handle && p->handles > 0) return p;
  return NULL;
}

/* Frees `p` once nothing refers to it. Caller holds g_lock. */
/*
 * Note [Physical pool]: a physical allocation made without CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR cannot be exported,
 * so it needs no file of its own: it is a range of one sparse memfd per process (the pool), kept open, mapped at the
 * range's offset. One memfd per allocation would hold one file descriptor each for its whole life, and a process
 * mapping tens of GiB in 2 MiB pages would run out of descriptors (20 000 on these machines: 39 GiB). Freed ranges
 * are punched out of the file (their pages go back to the host) and kept in per-size lists for reuse.
 */
static int g_pool_fd = -1;
static size_t g_pool_top;
struct pool_range {
  size_t offset;
  size_t bytes;
  struct pool_range *next;
};
static struct pool_range *g_pool_free;

/* A range of `bytes` in the pool, or (size_t)-1. Caller holds g_lock. */
static size_t pool_take(size_t bytes) {
  for (struct pool_range **link = &g_pool_free; *link; link = &(*link)->next)
    if ((*link)->bytes == bytes) {
      struct pool_range *r = *link;
      size_t offset = r->offset;
      *link = r->next;
      free(r);
      return offset;
    }
  if (g_pool_fd < 0) {
    g_pool_fd = memfd_create(SHM_PREFIX "pool", MFD_CLOEXEC);
    if (g_pool_fd < 0) return (size_t)-1;
  }
  if (ftruncate(g_pool_fd, (off_t)(g_pool_top + bytes)) != 0) return (size_t)-1;
  size_t offset = g_pool_top;
  g_pool_top += bytes;
  return offset;
}

/* Returns a range to the pool, its pages to the host. Caller holds g_lock. */
static void pool_give(size_t offset, size_t bytes) {
  fallocate(g_pool_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)offset, (off_t)bytes);
  struct pool_range *r = malloc(sizeof *r);
  if (r == NULL) return; /* the range is lost to reuse, nothing else */
  *r = (struct pool_range){.offset = offset, .bytes = bytes, .next = g_pool_free};
  g_pool_free = r;
}

static void drop_physical_if_unused(struct physical *p) {
  if (p->handles > 0 || p->mappings > 0) return;
  for (struct physical **link = &g_physicals; *link; link = &(*link)->next)
    if (*link == p) {
      *link = p->next;
      break;
    }
  if (p->counted) g_devices[p->device].used_bytes -= p->bytes;
  if (p->fd >= 0) close(p->fd);
  else pool_give(p->pool_offset, p->bytes);
  free(p);
}

static struct reservation *find_reservation(const char *p, size_t bytes) {
  for (struct reservation *r = g_reservations; r; r = r->next)
    if (p >= r->base && p + bytes <= r->base + r->bytes && p + bytes >= p) return r;
  return NULL;
}

static struct mapping *mapping_at(const char *p) {
  for (struct mapping *m = g_mappings; m; m = m->next)
    if (p >= m->base && p < m->base + m->bytes) return m;
  return NULL;
}

/* Whether [p, p + bytes) is exactly a run of whole, adjacent mappings (and not empty). Caller holds g_lock. */
static int whole_mappings(const char *p, size_t bytes) {
  if (bytes == 0 || p + bytes < p) return 0;
  for (const char *cursor = p; cursor < p + bytes;) {
    struct mapping *m = mapping_at(cursor);
    if (m == NULL || m->base != cursor || m->base + m->bytes > p + bytes) return 0;
    cursor += m->bytes;
  }
  return 1;
}

/* Whether every byte of [p, p + bytes) (the byte at p when bytes == 0) is in a mapping with at least `prot`.
   Caller holds g_lock. */
static int accessible_mappings(const char *p, size_t bytes, int prot) {
  const char *end = bytes == 0 ? p + 1 : p + bytes;
  if (end < p) return 0;
  for (const char *cursor = p; cursor < end;) {
    struct mapping *m = mapping_at(cursor);
    if (m == NULL || (m->prot & prot) != prot) return 0;
    cursor = m->base + m->bytes;
  }
  return 1;
}

static int valid_allocation_prop(const CUmemAllocationProp *prop) {
  return prop != NULL && prop->type == CU_MEM_ALLOCATION_TYPE_PINNED && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE;
}

CUresult CUDAAPI cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop, CUmemAllocationGranularity_flags option) {
  ENTER("cuMemGetAllocationGranularity");
  if (granularity == NULL || !valid_allocation_prop(prop)) return CUDA_ERROR_INVALID_VALUE;
  if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) return CUDA_ERROR_INVALID_VALUE;
  /* No device check: the driver (580, H200) answers a granularity for a device index past its count. */
  *granularity = STANDIN_GRANULARITY;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr, unsigned long long flags) {
  ENTER("cuMemAddressReserve");
  (void)addr; /* a hint the driver may ignore; so does the stand-in */
  if (ptr == NULL || size == 0 || !granular(size) || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (alignment & (alignment - 1)) return CUDA_ERROR_INVALID_VALUE;
  if (alignment < STANDIN_GRANULARITY) alignment = STANDIN_GRANULARITY;
  struct reservation *r = malloc(sizeof *r);
  if (r == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  size_t span = size + alignment;
  char *raw = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) {
    free(r);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  char *base = (char *)(((uintptr_t)raw + alignment - 1) & ~(uintptr_t)(alignment - 1));
  if (base > raw) munmap(raw, (size_t)(base - raw));
  if (raw + span > base + size) munmap(base + size, (size_t)(raw + span - (base + size)));
  *r = (struct reservation){.base = base, .bytes = size};
  pthread_mutex_lock(&g_lock);
  r->next = g_reservations;
  g_reservations = r;
  pthread_mutex_unlock(&g_lock);
  *ptr = (CUdeviceptr)(uintptr_t)base;
  return CUDA_SUCCESS;
}

/* Unmaps every mapping inside [p, p + bytes). Caller holds g_lock. */
static void drop_mappings(char *p, size_t bytes) {
  for (struct mapping **link = &g_mappings; *link;) {
    struct mapping *m = *link;
    if (m->base >= p && m->base + m->bytes <= p + bytes) {
      *link = m->next;
      m->phys->mappings--;
      drop_physical_if_unused(m->phys);
      free(m);
    } else {
      link = &m->next;
    }
  }
}

CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  ENTER("cuMemAddressFree");
  char *base = (char *)(uintptr_t)ptr;
  pthread_mutex_lock(&g_lock);
  struct reservation **link = &g_reservations;
  while (*link && !((*link)->base == base && (*link)->bytes == size)) link = &(*link)->next;
  if (*link == NULL) {
    pthread_mutex_unlock(&g_lock);
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct reservation *r = *link;
  *link = r->next;
  drop_mappings(base, size); /* the stand-in unmaps what the caller left mapped */
  pthread_mutex_unlock(&g_lock);
  munmap(base, size);
  free(r);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop, unsigned long long flags) {
  ENTER("cuMemCreate");
  if (handle == NULL || size == 0 || !granular(size) || flags != 0 || !valid_allocation_prop(prop)) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(prop->location.id)) return CUDA_ERROR_INVALID_DEVICE;
  if (prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_NONE && prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
    return CUDA_ERROR_NOT_SUPPORTED;
  int device = prop->location.id;
  struct physical *p = malloc(sizeof *p);
  if (p == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  pthread_mutex_lock(&g_lock);
  int room = take_capacity(device, size);
  pthread_mutex_unlock(&g_lock);
  if (!room) {
    free(p);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  int exportable = prop->requestedHandleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t pool_offset = 0;
  int fd = -1;
  if (exportable) {
    fd = memfd_create(SHM_PREFIX "vmm", MFD_CLOEXEC);
    if (fd >= 0 && ftruncate(fd, (off_t)size) != 0) {
      close(fd);
      fd = -1;
    }
  } else {
    pthread_mutex_lock(&g_lock);
    pool_offset = pool_take(size);
    pthread_mutex_unlock(&g_lock);
  }
  if (exportable ? fd < 0 : pool_offset == (size_t)-1) {
    pthread_mutex_lock(&g_lock);
    g_devices[device].used_bytes -= size;
    pthread_mutex_unlock(&g_lock);
    free(p);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *p = (struct physical){.fd = fd, .pool_offset = pool_offset, .bytes = size, .device = device, .counted = 1,
                         .exportable = prop->requestedHandleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, .handles = 1};
  pthread_mutex_lock(&g_lock);
  p->next = g_physicals;
  g_physicals = p;
  pthread_mutex_unlock(&g_lock);
  *handle = (CUmemGenericAllocationHandle)(uintptr_t)p;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle) {
  ENTER("cuMemRelease");
  pthread_mutex_lock(&g_lock);
  struct physical *p = find_physical(handle);
  if (p == NULL) {
    pthread_mutex_unlock(&g_lock);
    return CUDA_ERROR_INVALID_VALUE;
  }
  p->handles--;
  drop_physical_if_unused(p);
  pthread_mutex_unlock(&g_lock);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle, unsigned long long flags) {
  ENTER("cuMemMap");
  char *base = (char *)(uintptr_t)ptr;
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  struct mapping *m = malloc(sizeof *m);
  if (m == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  pthread_mutex_lock(&g_lock);
  struct physical *p = find_physical(handle);
  /* Note [Whole allocations only]: the driver documents that offset must currently be zero, and driver 580 on an
     H200 answered both a non-zero offset and a mapping of half an allocation with NOT_SUPPORTED. So a physical
     allocation is mapped whole or not at all; the stand-in's mappings could show any range, but refuse as the
     driver does. */
  if (p != NULL && (offset != 0 || size != p->bytes)) {
    pthread_mutex_unlock(&g_lock);
    free(m);
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  if (size == 0 || !granular(size) || !granular((uintptr_t)base)) {
    pthread_mutex_unlock(&g_lock);
    free(m);
    return CUDA_ERROR_INVALID_VALUE;
  }
  int overlaps = 0;
  for (struct mapping *x = g_mappings; x; x = x->next) overlaps |= x->base < base + size && base < x->base + x->bytes;
  if (p == NULL || offset > p->bytes || size > p->bytes - offset || find_reservation(base, size) == NULL || overlaps) {
    pthread_mutex_unlock(&g_lock);
    free(m);
    return CUDA_ERROR_INVALID_VALUE;
  }
  int fd = p->fd >= 0 ? p->fd : g_pool_fd;
  off_t at = (off_t)(p->fd >= 0 ? offset : p->pool_offset + offset);
  if (mmap(base, size, PROT_NONE, MAP_SHARED | MAP_FIXED, fd, at) == MAP_FAILED) {
    pthread_mutex_unlock(&g_lock);
    free(m);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *m = (struct mapping){.base = base, .bytes = size, .phys = p, .offset = offset, .prot = PROT_NONE, .next = g_mappings};
  g_mappings = m;
  p->mappings++;
  pthread_mutex_unlock(&g_lock);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size) {
  ENTER("cuMemUnmap");
  char *base = (char *)(uintptr_t)ptr;
  pthread_mutex_lock(&g_lock);
  /* A range that holds no mapping at all is unmapped already: the driver (580, H200) answers it with success. */
  int mapped = 0;
  for (struct mapping *x = g_mappings; x; x = x->next) mapped |= x->base < base + size && base < x->base + x->bytes;
  if (!mapped && size != 0) {
    pthread_mutex_unlock(&g_lock);
    return CUDA_SUCCESS;
  }
  if (!whole_mappings(base, size)) {
    pthread_mutex_unlock(&g_lock);
    return CUDA_ERROR_INVALID_VALUE;
  }
  mmap(base, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  drop_mappings(base, size);
  pthread_mutex_unlock(&g_lock);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count) {
  ENTER("cuMemSetAccess");
  char *base = (char *)(uintptr_t)ptr;
  if (desc == NULL || count == 0) return CUDA_ERROR_INVALID_VALUE;
  int prot = -1;
  for (size_t i = 0; i < count; i++) {
    if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(desc[i].location.id)) return CUDA_ERROR_INVALID_DEVICE;
    int p;
    switch (desc[i].flags) {
      case CU_MEM_ACCESS_FLAGS_PROT_NONE: p = PROT_NONE; break;
      case CU_MEM_ACCESS_FLAGS_PROT_READ: p = PROT_READ; break;
      case CU_MEM_ACCESS_FLAGS_PROT_READWRITE: p = PROT_READ | PROT_WRITE; break;
      default: return CUDA_ERROR_INVALID_VALUE;
    }
    /* Host memory has one protection for every device; the widest requested wins. */
    if (p > prot) prot = p;
  }
  pthread_mutex_lock(&g_lock);
  if (!whole_mappings(base, size)) {
    pthread_mutex_unlock(&g_lock);
    return CUDA_ERROR_INVALID_VALUE;
  }
  mprotect(base, size, prot);
  for (const char *cursor = base; cursor < base + size;) {
    struct mapping *m = mapping_at(cursor);
    m->prot = prot;
    cursor += m->bytes;
  }
  pthread_mutex_unlock(&g_lock);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
                                              CUmemAllocationHandleType handleType, unsigned long long flags) {
  ENTER("cuMemExportToShareableHandle");
  if (shareableHandle == NULL || flags != 0 || handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&g_lock);
  struct physical *p = find_physical(handle);
  int fd = p != NULL && p->exportable ? fcntl(p->fd, F_DUPFD_CLOEXEC, 0) : -2;
  pthread_mutex_unlock(&g_lock);
  if (fd == -2) return CUDA_ERROR_INVALID_VALUE;
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  *(int *)shareableHandle = fd;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle, CUmemAllocationHandleType shHandleType) {
  ENTER("cuMemImportFromShareableHandle");
  if (handle == NULL || shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_INVALID_VALUE;
  int fd = (int)(intptr_t)osHandle;
  /* Only a memfd this stand-in made (in any process) is accepted, as the driver accepts only its own. */
  char link[64], target[256];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, target, sizeof target - 1);
  if (n < 0) return CUDA_ERROR_INVALID_VALUE;
  target[n] = '\0';
  struct stat st;
  if (strncmp(target, "/memfd:" SHM_PREFIX "vmm", strlen("/memfd:" SHM_PREFIX "vmm")) != 0 || fstat(fd, &st) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  struct physical *p = malloc(sizeof *p);
  int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (p == NULL || own < 0) {
    free(p);
    if (own >= 0) close(own);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  int device = t_current != NULL ? t_current->device : 0;
  *p = (struct physical){.fd = own, .bytes = (size_t)st.st_size, .device = device, .counted = 0, .exportable = 1, .handles = 1};
  pthread_mutex_lock(&g_lock);
  p->next = g_physicals;
  g_physicals = p;
  pthread_mutex_unlock(&g_lock);
  *handle = (CUmemGenericAllocationHandle)(uintptr_t)p;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr) {
  ENTER("cuMemRetainAllocationHandle");
  if (handle == NULL) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&g_lock);
  struct mapping *m = mapping_at(addr);
  if (m != NULL) {
    m->phys->handles++;
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)m->phys;
  }
  pthread_mutex_unlock(&g_lock);
  return m != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr) {
  ENTER("cuMemGetAddressRange_v2");
  REQUIRE_CONTEXT();
  char *p = (char *)(uintptr_t)dptr;
  char *base = NULL;
  size_t bytes = 0;
  pthread_mutex_lock(&g_lock);
  struct region *r = find_region(p, 0, DEVICE_KINDS);
  struct mapping *m = r == NULL ? mapping_at(p) : NULL;
  if (r != NULL) base = r->base, bytes = r->bytes;
  else if (m != NULL) base = m->base, bytes = m->bytes;
  pthread_mutex_unlock(&g_lock);
  if (base == NULL) return CUDA_ERROR_NOT_FOUND;
  if (pbase != NULL) *pbase = (CUdeviceptr)(uintptr_t)base;
  if (psize != NULL) *psize = bytes;
  return CUDA_SUCCESS;
}

/* Whether [p, p + bytes) is device memory the caller may read and write: one cuMemAlloc_v2 or IPC-opened
   allocation, or read-write VMM mappings. */
static int valid_device_range(CUdeviceptr p, size_t bytes) {
  const char *c = (const char *)(uintptr_t)p;
  pthread_mutex_lock(&g_lock);
  struct region *r = find_region(c, bytes, DEVICE_KINDS);
  if (r != NULL) r->touched = 1;
  int ok = r != NULL || accessible_mappings(c, bytes, PROT_READ | PROT_WRITE);
  pthread_mutex_unlock(&g_lock);
  return ok;
}

/* ---- legacy IPC: memory ---- */

/* The layout of the 64 bytes of a CUipcMemHandle / CUipcEventHandle the stand-in gives out. */
struct ipc_handle {
  uint32_t magic;
  int32_t pid;
  uint64_t serial;
  uint64_t instance; /* library_instance() in the exporting process */
  uint64_t offset; /* memory: the allocation's offset in the exporter's heap */
  uint64_t bytes;
  int32_t device;
  int32_t unused; /* no padding: every byte of the handle is defined */
};
typedef char ipc_handle_fits_mem[sizeof(struct ipc_handle) <= sizeof(CUipcMemHandle) ? 1 : -1];
typedef char ipc_handle_fits_event[sizeof(struct ipc_handle) <= sizeof(CUipcEventHandle) ? 1 : -1];

CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr) {
  ENTER("cuIpcGetMemHandle");
  REQUIRE_CONTEXT();
  if (pHandle == NULL) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&g_lock);
  struct region *r = find_region((void *)(uintptr_t)dptr, 1, KIND(REGION_DEVICE));
  struct ipc_handle h = {0};
  if (r != NULL) r->touched = 1; /* another process may touch it */
  if (r != NULL)
    h = (struct ipc_handle){.magic = IPC_MEM_MAGIC, .pid = r->owner, .serial = r->serial, .instance = r->instance,
                            .offset = (uint64_t)(r->base - g_heap), .bytes = r->bytes, .device = r->device};
  pthread_mutex_unlock(&g_lock);
  if (r == NULL) return CUDA_ERROR_INVALID_VALUE;
  memset(pHandle, 0, sizeof *pHandle);
  memcpy(pHandle, &h, sizeof h);
  return CUDA_SUCCESS;
}

// Note [Opening a handle in its own process]
// The driver documents CUDA_ERROR_INVALID_CONTEXT among cuIpcOpenMemHandle's results, and opening a handle in the
// process that exported it is reported to fail with it ("invalid device context"; the runtime's
// cudaIpcOpenMemHandle then gives cudaErrorDeviceUninitialized, its error 201 of the same text). The stand-in
// returns CUDA_ERROR_INVALID_CONTEXT for memory and event handles alike.

CUresult CUDAAPI cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags) {
  ENTER("cuIpcOpenMemHandle_v2");
  REQUIRE_CONTEXT();
  if (pdptr == NULL || Flags != CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) return CUDA_ERROR_INVALID_VALUE;
  struct ipc_handle h;
  memcpy(&h, &handle, sizeof h);
  if (h.magic != IPC_MEM_MAGIC || h.bytes == 0) return CUDA_ERROR_INVALID_HANDLE;
  if (h.pid == getpid()) return CUDA_ERROR_INVALID_CONTEXT; /* Note [Opening a handle in its own process] */
  pthread_mutex_lock(&g_lock);
  for (struct region *r = g_regions; r; r = r->next)
    if (r->kind == REGION_IPC_OPENED && r->owner == h.pid && r->instance == h.instance && r->serial == h.serial) {
      /* As the driver does, a second open in the same context returns the same pointer and counts. */
      r->opens++;
      *pdptr = (CUdeviceptr)(uintptr_t)r->base;
      pthread_mutex_unlock(&g_lock);
      return CUDA_SUCCESS;
    }
  pthread_mutex_unlock(&g_lock);
  char name[128];
  heap_name(name, sizeof name, h.pid, h.instance);
  struct region *r = malloc(sizeof *r);
  void *base = r != NULL && h.offset % PAGE_BYTES == 0 ? map_shared(name, h.offset, h.bytes, 0) : NULL;
  if (base == NULL) {
    free(r);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  *r = (struct region){.kind = REGION_IPC_OPENED, .base = base, .bytes = h.bytes, .device = h.device, .owner = h.pid,
                       .instance = h.instance, .serial = h.serial, .opens = 1};
  pthread_mutex_lock(&g_lock);
  link_region(r);
  pthread_mutex_unlock(&g_lock);
  *pdptr = (CUdeviceptr)(uintptr_t)base;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuIpcCloseMemHandle(CUdeviceptr dptr) {
  ENTER("cuIpcCloseMemHandle");
  REQUIRE_CONTEXT();
  pthread_mutex_lock(&g_lock);
  struct region *r = find_region((void *)(uintptr_t)dptr, 0, KIND(REGION_IPC_OPENED));
  if (r == NULL || r->base != (char *)(uintptr_t)dptr) {
    pthread_mutex_unlock(&g_lock);
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (--r->opens > 0) {
    pthread_mutex_unlock(&g_lock);
    return CUDA_SUCCESS;
  }
  unlink_region(r);
  pthread_mutex_unlock(&g_lock);
  munmap(r->base, r->bytes);
  free(r);
  return CUDA_SUCCESS;
}

/* ---- streams and events ---- */

#define STREAM_MAGIC 0x5354524dU
#define EVENT_MAGIC 0x45564e54U

/* What a record or wait touches. Process-shared (in shared memory) for CU_EVENT_INTERPROCESS events. */
struct event_state {
  pthread_mutex_t lock;
  pthread_cond_t completed_cond;
  uint64_t recorded;  /* generation of the latest cuEventRecord */
  uint64_t completed; /* generation the stream has reached; complete when completed == recorded */
};

struct CUevent_st {
  unsigned magic;
  unsigned flags;
  int device;
  struct event_state *state; /* &local, or a shared memory mapping */
  struct event_state local;
  pid_t owner;               /* interprocess: the process whose shared memory holds the state */
  uint64_t instance;         /* and the library copy there */
  uint64_t serial;
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
  int device;
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
  struct event_state *s = e->state;
  pthread_mutex_lock(&s->lock);
  while (s->completed < generation) pthread_cond_wait(&s->completed_cond, &s->lock);
  pthread_mutex_unlock(&s->lock);
}

static void run_op(struct op *o) {
  switch (o->kind) {
    case OP_COPY: memmove(o->dst, o->src, o->bytes); break;
    case OP_RECORD: {
      struct event_state *s = o->event->state;
      pthread_mutex_lock(&s->lock);
      if (o->generation > s->completed) s->completed = o->generation;
      pthread_cond_broadcast(&s->completed_cond);
      pthread_mutex_unlock(&s->lock);
      break;
    }
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
    if (o->kind == OP_RECORD) {
      /* Completed under the stream's lock, so that a query of the stream after the event completed finds it idle
         when nothing followed the record, as on the driver. (Lock order: stream, then event; nothing takes them
         the other way round.) */
      run_op(o);
      free(o);
      pthread_cond_broadcast(&s->changed);
      continue;
    }
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
  s->device = t_current->device;
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

/* Initializes an event's state; process-shared when `shared`. */
static void init_event_state(struct event_state *s, int shared) {
  pthread_mutexattr_t ma;
  pthread_condattr_t ca;
  pthread_mutexattr_init(&ma);
  pthread_condattr_init(&ca);
  if (shared) {
    pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
    pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED);
  }
  pthread_mutex_init(&s->lock, &ma);
  pthread_cond_init(&s->completed_cond, &ca);
  pthread_mutexattr_destroy(&ma);
  pthread_condattr_destroy(&ca);
  s->recorded = s->completed = 0;
}

static void link_event(struct CUevent_st *e) {
  pthread_mutex_lock(&g_lock);
  e->next_live = g_events;
  g_events = e;
  pthread_mutex_unlock(&g_lock);
}

CUresult CUDAAPI cuEventCreate(CUevent *phEvent, unsigned int flags) {
  ENTER("cuEventCreate");
  REQUIRE_CONTEXT();
  if (phEvent == NULL || (flags & ~0x0Fu) != 0) return CUDA_ERROR_INVALID_VALUE;
  if ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING)) return CUDA_ERROR_INVALID_VALUE;
  struct CUevent_st *e = calloc(1, sizeof *e);
  if (e == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  e->magic = EVENT_MAGIC;
  e->flags = flags;
  e->device = t_current->device;
  e->owner = getpid();
  e->instance = library_instance();
  e->state = &e->local;
  if (flags & CU_EVENT_INTERPROCESS) {
    pthread_mutex_lock(&g_lock);
    e->serial = ++g_serial;
    pthread_mutex_unlock(&g_lock);
    char name[128];
    shm_name(name, sizeof name, e->owner, e->instance, 'e', e->serial);
    e->state = map_shared(name, 0, sizeof(struct event_state), 1);
    if (e->state == NULL) {
      free(e);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  init_event_state(e->state, (flags & CU_EVENT_INTERPROCESS) != 0);
  link_event(e);
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
  /* The driver lets queued records and waits finish; here the struct (and an interprocess event's mapping) is
     kept (leaked) so a queued op never touches freed memory. The exporter's shared memory name goes now:
     processes that opened the event keep their mapping. */
  if ((hEvent->flags & CU_EVENT_INTERPROCESS) && hEvent->owner == getpid()) {
    char name[128];
    shm_name(name, sizeof name, hEvent->owner, hEvent->instance, 'e', hEvent->serial);
    shm_unlink(name);
  }
  hEvent->magic = 0;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream) {
  ENTER("cuEventRecord");
  if (!valid_event(hEvent)) return CUDA_ERROR_INVALID_HANDLE;
  if (hStream != NULL && !valid_stream(hStream)) return CUDA_ERROR_INVALID_HANDLE;
  /* The event and the stream must belong to one context (the NULL stream: the current context's), as the driver
     requires; an event imported from another process is recorded where it was opened. */
  if (hStream != NULL ? hStream->device != hEvent->device : t_current != NULL && t_current->device != hEvent->device)
    return CUDA_ERROR_INVALID_HANDLE;
  pthread_mutex_lock(&hEvent->state->lock);
  uint64_t generation = ++hEvent->state->recorded;
  pthread_mutex_unlock(&hEvent->state->lock);
  struct op o = {.kind = OP_RECORD, .event = hEvent, .generation = generation};
  return enqueue(hStream, o);
}

CUresult CUDAAPI cuEventQuery(CUevent hEvent) {
  ENTER("cuEventQuery");
  if (!valid_event(hEvent)) return CUDA_ERROR_INVALID_HANDLE;
  pthread_mutex_lock(&hEvent->state->lock);
  int done = hEvent->state->completed >= hEvent->state->recorded;
  pthread_mutex_unlock(&hEvent->state->lock);
  return done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult CUDAAPI cuEventSynchronize(CUevent hEvent) {
  ENTER("cuEventSynchronize");
  if (!valid_event(hEvent)) return CUDA_ERROR_INVALID_HANDLE;
  pthread_mutex_lock(&hEvent->state->lock);
  uint64_t generation = hEvent->state->recorded;
  pthread_mutex_unlock(&hEvent->state->lock);
  wait_event_generation(hEvent, generation);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int flags) {
  ENTER("cuStreamWaitEvent");
  if (!valid_event(hEvent)) return CUDA_ERROR_INVALID_HANDLE;
  if (hStream != NULL && !valid_stream(hStream)) return CUDA_ERROR_INVALID_HANDLE;
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&hEvent->state->lock);
  uint64_t generation = hEvent->state->recorded;
  pthread_mutex_unlock(&hEvent->state->lock);
  struct op o = {.kind = OP_WAIT, .event = hEvent, .generation = generation};
  return enqueue(hStream, o);
}

/* ---- legacy IPC: events ---- */

CUresult CUDAAPI cuIpcGetEventHandle(CUipcEventHandle *pHandle, CUevent event) {
  ENTER("cuIpcGetEventHandle");
  if (pHandle == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_event(event)) return CUDA_ERROR_INVALID_HANDLE;
  if (!(event->flags & CU_EVENT_INTERPROCESS)) return CUDA_ERROR_INVALID_VALUE;
  struct ipc_handle h = {.magic = IPC_EVENT_MAGIC, .pid = event->owner, .serial = event->serial,
                         .instance = event->instance, .bytes = sizeof(struct event_state), .device = event->device};
  memset(pHandle, 0, sizeof *pHandle);
  memcpy(pHandle, &h, sizeof h);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuIpcOpenEventHandle(CUevent *phEvent, CUipcEventHandle handle) {
  ENTER("cuIpcOpenEventHandle");
  REQUIRE_CONTEXT();
  if (phEvent == NULL) return CUDA_ERROR_INVALID_VALUE;
  struct ipc_handle h;
  memcpy(&h, &handle, sizeof h);
  if (h.magic != IPC_EVENT_MAGIC || h.bytes != sizeof(struct event_state)) return CUDA_ERROR_INVALID_HANDLE;
  if (h.pid == getpid()) return CUDA_ERROR_INVALID_CONTEXT; /* Note [Opening a handle in its own process] */
  struct CUevent_st *e = calloc(1, sizeof *e);
  if (e == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  char name[128];
  shm_name(name, sizeof name, h.pid, h.instance, 'e', h.serial);
  e->state = map_shared(name, 0, sizeof(struct event_state), 0);
  if (e->state == NULL) {
    free(e);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  e->magic = EVENT_MAGIC;
  e->flags = CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING;
  e->device = t_current->device;
  e->owner = h.pid;
  e->instance = h.instance;
  e->serial = h.serial;
  link_event(e);
  *phEvent = e;
  return CUDA_SUCCESS;
}

/* Test hook: events of this process not destroyed (created, or opened from another process's handle). */
int standinLiveEvents(void) {
  int n = 0;
  pthread_mutex_lock(&g_lock);
  for (struct CUevent_st *x = g_events; x; x = x->next_live) n++;
  pthread_mutex_unlock(&g_lock);
  return n;
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
