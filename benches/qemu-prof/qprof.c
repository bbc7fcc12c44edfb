/*
 * qprof: a guest profiler for the emulated routers (tests/qemu/run.sh), as a TCG plugin
 * for QEMU 7.2 (Debian 12's qemu-system-*, plugin API version 1). A benchmark tool, not
 * a test: under TCG a guest's time follows the instructions it runs, and this counts
 * them, by translated block, without touching the guest.
 *
 *   cc -O2 -shared -fPIC -o qprof.so qprof.c $(pkg-config --cflags --libs glib-2.0)
 *   NP_QEMU_PLUGIN=$PWD/qprof.so,out=/tmp/qprof.txt tests/qemu/run.sh mipsel
 *   benches/qemu-prof/report.py /tmp/qprof.txt UNSTRIPPED_NODEPORTD [FROM TO]
 *
 * Arguments: out=PATH (required), calls=PATH (optional: a file of function entry
 * addresses, one hex number a line, e.g. `llvm-nm --defined-only` of the unstripped
 * binary; each call into one of them is counted by its caller's block, which slows the
 * guest several times).
 *
 * Every 200 ms of wall time a thread appends to PATH a line `T <seconds>` and, for each
 * block executed since the last one, `<vaddr> <key> <insns> <first word> <executions>`:
 * blocks are told apart by the host address of their code, so two processes' code at one
 * virtual address (every static binary starts at 0x400000) never mix, and the first
 * instruction word lets the report keep the blocks of one binary. With calls=, lines
 * `E <caller vaddr> <caller word> <callee vaddr> <calls>` follow.
 *
 * The declarations below are the few functions of QEMU's plugin API used here
 * (include/qemu/qemu-plugin.h of QEMU 7.2, written out from its documentation).
 */
#include <glib.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef uint64_t qemu_plugin_id_t;
struct qemu_plugin_tb;
struct qemu_plugin_insn;
typedef struct qemu_info_t qemu_info_t;
typedef void (*tb_trans_cb_t)(qemu_plugin_id_t, struct qemu_plugin_tb *);
typedef void (*vcpu_udata_cb_t)(unsigned int, void *);
typedef void (*udata_cb_t)(qemu_plugin_id_t, void *);
enum { CB_NO_REGS = 0 };
enum { INLINE_ADD_U64 = 0 };
void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t, tb_trans_cb_t);
void qemu_plugin_register_vcpu_tb_exec_cb(struct qemu_plugin_tb *, vcpu_udata_cb_t, int, void *);
void qemu_plugin_register_vcpu_tb_exec_inline(struct qemu_plugin_tb *, int, void *, uint64_t);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *);
uint64_t qemu_plugin_tb_vaddr(const struct qemu_plugin_tb *);
struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *, size_t);
const void *qemu_plugin_insn_data(const struct qemu_plugin_insn *);
void *qemu_plugin_insn_haddr(const struct qemu_plugin_insn *);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t, udata_cb_t, void *);

__attribute__((visibility("default"))) int qemu_plugin_version = 1;

/* One translated block. `count` is bumped by the block itself (inline, no call). */
struct block {
    uint64_t key, vaddr;
    uint32_t insns, word;
    int entry;
    uint64_t count, written;
};

struct call {
    struct block *from, *to;
    uint64_t count;
};

static GMutex lock;
static GHashTable *blocks; /* key -> block */
static GPtrArray *order;   /* every block, for the writer */
static GHashTable *entries; /* function entry vaddrs (calls=) */
static GHashTable *calls;   /* (from, to) -> call */
static struct block *last;  /* the block executed last (calls=; one vCPU) */
static FILE *out;

static guint call_hash(gconstpointer p) {
    const struct call *c = p;
    return g_direct_hash(c->from) ^ (g_direct_hash(c->to) * 31u);
}

static gboolean call_equal(gconstpointer a, gconstpointer b) {
    const struct call *x = a, *y = b;
    return x->from == y->from && x->to == y->to;
}

/* Called with the lock held. */
static void write_counts(void) {
    fprintf(out, "T %.3f\n", g_get_monotonic_time() / 1e6);
    for (guint i = 0; i < order->len; i++) {
        struct block *b = g_ptr_array_index(order, i);
        uint64_t c = b->count;
        if (c != b->written) {
            fprintf(out, "%" PRIx64 " %" PRIx64 " %u %08x %" PRIu64 "\n", b->vaddr, b->key, b->insns, b->word,
                    c - b->written);
            b->written = c;
        }
    }
    if (calls) {
        GHashTableIter it;
        gpointer k, v;
        g_hash_table_iter_init(&it, calls);
        while (g_hash_table_iter_next(&it, &k, &v)) {
            struct call *c = v;
            if (c->count) {
                fprintf(out, "E %" PRIx64 " %08x %" PRIx64 " %" PRIu64 "\n", c->from->vaddr, c->from->word,
                        c->to->vaddr, c->count);
                c->count = 0;
            }
        }
    }
    fflush(out);
}

static gpointer writer(gpointer unused) {
    for (;;) {
        g_usleep(200000);
        g_mutex_lock(&lock);
        write_counts();
        g_mutex_unlock(&lock);
    }
    return NULL;
}

static void on_exec(unsigned int vcpu, void *udata) {
    struct block *b = udata;
    if (b->entry && last) {
        struct call k = {last, b, 0};
        g_mutex_lock(&lock);
        struct call *c = g_hash_table_lookup(calls, &k);
        if (!c) {
            c = g_new0(struct call, 1);
            *c = k;
            g_hash_table_add(calls, c);
        }
        c->count++;
        g_mutex_unlock(&lock);
    }
    last = b;
}

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb) {
    size_t n = qemu_plugin_tb_n_insns(tb);
    struct qemu_plugin_insn *first = qemu_plugin_tb_get_insn(tb, 0);
    uint64_t vaddr = qemu_plugin_tb_vaddr(tb);
    /* The same code may be translated again as a block of another length. */
    uint64_t key = (uint64_t)(uintptr_t)qemu_plugin_insn_haddr(first) ^ ((uint64_t)n << 56);
    g_mutex_lock(&lock);
    struct block *b = g_hash_table_lookup(blocks, &key);
    if (!b) {
        b = g_new0(struct block, 1);
        b->key = key;
        b->vaddr = vaddr;
        b->insns = (uint32_t)n;
        memcpy(&b->word, qemu_plugin_insn_data(first), sizeof b->word);
        b->entry = entries && g_hash_table_contains(entries, GUINT_TO_POINTER((guint)vaddr));
        g_hash_table_insert(blocks, &b->key, b);
        g_ptr_array_add(order, b);
    }
    g_mutex_unlock(&lock);
    qemu_plugin_register_vcpu_tb_exec_inline(tb, INLINE_ADD_U64, &b->count, 1);
    if (entries) {
        qemu_plugin_register_vcpu_tb_exec_cb(tb, on_exec, CB_NO_REGS, b);
    }
}

static void at_exit(qemu_plugin_id_t id, void *unused) {
    g_mutex_lock(&lock);
    write_counts();
    /* The lock stays held: the writer thread must not write after this. */
}

__attribute__((visibility("default"))) int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info,
                                                                 int argc, char **argv) {
    const char *path = NULL, *calls_path = NULL;
    for (int i = 0; i < argc; i++) {
        if (!strncmp(argv[i], "out=", 4)) {
            path = argv[i] + 4;
        } else if (!strncmp(argv[i], "calls=", 6)) {
            calls_path = argv[i] + 6;
        } else {
            fprintf(stderr, "qprof: unknown argument %s\n", argv[i]);
            return -1;
        }
    }
    if (!path || !(out = fopen(path, "w"))) {
        fprintf(stderr, "qprof: out=PATH is required and must be writable\n");
        return -1;
    }
    if (calls_path) {
        FILE *f = fopen(calls_path, "r");
        if (!f) {
            fprintf(stderr, "qprof: cannot read %s\n", calls_path);
            return -1;
        }
        entries = g_hash_table_new(g_direct_hash, g_direct_equal);
        calls = g_hash_table_new(call_hash, call_equal);
        unsigned int a;
        while (fscanf(f, "%x", &a) == 1) {
            g_hash_table_add(entries, GUINT_TO_POINTER(a));
        }
        fclose(f);
    }
    blocks = g_hash_table_new(g_int64_hash, g_int64_equal);
    order = g_ptr_array_new();
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
    qemu_plugin_register_atexit_cb(id, at_exit, NULL);
    g_thread_new("qprof", writer, NULL);
    return 0;
}
