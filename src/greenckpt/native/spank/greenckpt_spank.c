/*
 * greenckpt_spank.c - Slurm SPANK plugin: energy-aware checkpoints with one #SBATCH line.
 *
 * Why a plugin: a site adopts greenckpt without users changing their job scripts. With
 * `sbatch --greenckpt` (or `#SBATCH --greenckpt`, or a site default in plugstack.conf) every
 * job step gets, on every node and before its tasks start, that node's greenckpt agent (started
 * as root, or joined when another step of the job runs there), and the tasks get the agent's
 * socket (GREENCKPT_RUNTIME_SOCKET) and, with --greenckpt-intercept, the FTI/SCR/VeloC
 * interposer. When the step ends, its hold is released; the last one leaves the node restored
 * and its report written. When the batch script ends, the job report is assembled as the
 * job's user.
 *
 * What the plugin itself does is small and never fails a job: it validates the options (an
 * unknown value is refused before the job is queued), runs `PYTHON -m greenckpt.cli.spank
 * join|release|report` with a bounded wait, applies the environment lines join prints, and
 * says in the job's output when a node runs unmanaged. Everything else (the agent, restoring,
 * reports, writing files as the user) is greenckpt's Python library: docs/admin-guide.md.
 *
 * plugstack.conf:  optional /path/greenckpt_spank.so python=/venv/bin/python [default=off|on]
 *                  [policy=NAME] [report=TEMPLATE] [profile=PATH]... [control=off]
 *                  [timeout=SECONDS] [spool=DIR]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <slurm/spank.h>

SPANK_PLUGIN(greenckpt, 1);

#define GC_BATCH_STEP 0xfffffffbU /* SLURM_BATCH_SCRIPT */
#define GC_MAX_NORMAL_STEP 0xfffffff0U /* SLURM_MAX_NORMAL_STEP_ID */
#define GC_TEXT 4096
#define GC_MAX_PROFILES 8
#define GC_MAX_ARGS 96

/* What --greenckpt takes besides on/off; cli/spank.py's SPANK_POLICIES lists the same. */
static const char *const POLICIES[] = {"profile", "performance", "powersave", "ondemand",
                                       "defaults", NULL};
static const char *const FAMILIES[] = {"fti", "scr", "veloc", NULL};
/* The only variables join may set for the tasks. */
static const char *const ALLOWED_ENV[] = {"GREENCKPT_RUNTIME_SOCKET", "GREENCKPT_INTERCEPT",
                                          "LD_PRELOAD", NULL};

/* ------------------------------------------------------------------ configuration */

static char site_python[GC_TEXT] = "/usr/bin/python3";
static int site_default_on = 0;
static char site_policy[64] = "profile";
static char site_report[GC_TEXT] = "greenckpt-%j";
static char site_profiles[GC_MAX_PROFILES][GC_TEXT];
static int site_profile_count = 0;
static int site_control = 1;
static int site_timeout = 30;
static char site_spool[GC_TEXT] = "/run/greenckpt-spank";

/* The user's options (0 / empty: not given). */
static char opt_greenckpt[64];
static char opt_intercept[16];
static char opt_report[GC_TEXT];

/* This step on this node. */
static int managed = 0;
static char message[GC_TEXT]; /* printed into the job's output by the first task */

static int in_list(const char *value, const char *const *list)
{
    for (int i = 0; list[i] != NULL; i++)
        if (strcmp(value, list[i]) == 0)
            return 1;
    return 0;
}

static int copy_text(char *dst, size_t size, const char *src)
{
    size_t n = strlen(src);
    if (n >= size)
        return -1;
    memcpy(dst, src, n + 1);
    return 0;
}

static int policy_ok(const char *value)
{
    return strcmp(value, "on") == 0 || strcmp(value, "off") == 0 || in_list(value, POLICIES);
}

/* ------------------------------------------------------------------ options */

static int cb_greenckpt(int val, const char *optarg, int remote)
{
    (void)val;
    (void)remote;
    /* No value: on. Slurm hands a batch job's steps a value-less option as "(null)". */
    int none = optarg == NULL || *optarg == '\0' || strcmp(optarg, "(null)") == 0;
    const char *value = none ? "on" : optarg;
    if (!policy_ok(value) || copy_text(opt_greenckpt, sizeof opt_greenckpt, value) != 0) {
        return -1;
    }
    return 0;
}

static int cb_intercept(int val, const char *optarg, int remote)
{
    (void)val;
    (void)remote;
    const char *value = optarg == NULL ? "" : optarg;
    if (!in_list(value, FAMILIES) ||
        copy_text(opt_intercept, sizeof opt_intercept, value) != 0) {
        return -1;
    }
    return 0;
}

static int cb_report(int val, const char *optarg, int remote)
{
    (void)val;
    (void)remote;
    const char *value = optarg == NULL ? "" : optarg;
    if (*value == '\0' || strchr(value, '\n') != NULL ||
        copy_text(opt_report, sizeof opt_report, value) != 0) {
        return -1;
    }
    return 0;
}

/* Registered in slurm_spank_init (not as the static spank_options table, which Slurm does
 * not read in sbatch/salloc: options there must be registered by the plugin). */
static struct spank_option options[] = {
    {"greenckpt", "[POLICY]",
     "energy-aware checkpoints (greenckpt) on every node of each step: on, off, or a "
     "policy (profile, performance, powersave, ondemand, defaults)",
     2, 0, cb_greenckpt},
    {"greenckpt-intercept", "fti|scr|veloc",
     "with --greenckpt: announce the checkpoints of an FTI, SCR or VeloC code (LD_PRELOAD)", 1,
     0, cb_intercept},
    {"greenckpt-report", "DIR",
     "with --greenckpt: the folder of the node and job reports (%j job id, %u user)", 1, 0,
     cb_report},
    SPANK_OPTIONS_TABLE_END};

static int parse_site_args(int ac, char **av)
{
    for (int i = 0; i < ac; i++) {
        const char *a = av[i];
        int bad = 0;
        if (strncmp(a, "python=", 7) == 0)
            bad = copy_text(site_python, sizeof site_python, a + 7);
        else if (strncmp(a, "default=", 8) == 0) {
            const char *v = a + 8;
            if (strcmp(v, "off") == 0)
                site_default_on = 0;
            else if (strcmp(v, "on") == 0)
                site_default_on = 1;
            else if (in_list(v, POLICIES)) {
                site_default_on = 1;
                bad = copy_text(site_policy, sizeof site_policy, v);
            } else
                bad = 1;
        } else if (strncmp(a, "policy=", 7) == 0)
            bad = !in_list(a + 7, POLICIES) || copy_text(site_policy, sizeof site_policy, a + 7);
        else if (strncmp(a, "report=", 7) == 0)
            bad = copy_text(site_report, sizeof site_report, a + 7);
        else if (strncmp(a, "profile=", 8) == 0 && site_profile_count < GC_MAX_PROFILES)
            bad = copy_text(site_profiles[site_profile_count++], GC_TEXT, a + 8);
        else if (strcmp(a, "control=off") == 0)
            site_control = 0;
        else if (strcmp(a, "control=on") == 0)
            site_control = 1;
        else if (strncmp(a, "timeout=", 8) == 0) {
            site_timeout = atoi(a + 8);
            bad = site_timeout < 2 || site_timeout > 600;
        } else if (strncmp(a, "spool=", 6) == 0)
            bad = a[6] != '/' || copy_text(site_spool, sizeof site_spool, a + 6);
        else
            bad = 1;
        if (bad) {
            slurm_error("greenckpt: plugstack.conf argument '%s' is not understood", a);
            return -1;
        }
    }
    return 0;
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
    if (parse_site_args(ac, av) != 0)
        return -1;
    for (int i = 0; options[i].name != NULL; i++)
        if (spank_option_register(sp, &options[i]) != ESPANK_SUCCESS) {
            slurm_error("greenckpt: cannot register --%s", options[i].name);
            return -1;
        }
    return 0;
}

/* The policy to run with, or NULL when greenckpt is off for this job. */
static const char *chosen_policy(void)
{
    const char *value = opt_greenckpt[0] ? opt_greenckpt : (site_default_on ? "on" : "off");
    if (strcmp(value, "off") == 0)
        return NULL;
    return strcmp(value, "on") == 0 ? site_policy : value;
}

/* ------------------------------------------------------------------ helpers */

static int step_id(spank_t sp, uint32_t *step)
{
    return spank_get_item(sp, S_JOB_STEPID, step) == ESPANK_SUCCESS ? 0 : -1;
}

static void job_env(spank_t sp, const char *name, char *buf, int len, const char *fallback)
{
    if (spank_getenv(sp, name, buf, len) != ESPANK_SUCCESS || buf[0] == '\0')
        snprintf(buf, (size_t)len, "%s", fallback);
}

/* Where a relative report folder lies: the folder the job was submitted from (the same for
 * the batch step and every srun step; $PWD is only what the client's environment said). */
static void submit_dir(spank_t sp, char *buf, int len)
{
    if (spank_getenv(sp, "SLURM_SUBMIT_DIR", buf, len) != ESPANK_SUCCESS || buf[0] != '/')
        job_env(sp, "PWD", buf, len, "/");
}

static void join_groups(char *out, size_t size, const gid_t *groups, int ngroups)
{
    out[0] = '\0';
    for (int i = 0; i < ngroups && groups != NULL; i++) {
        size_t len = strlen(out);
        snprintf(out + len, size - len, "%s%u", i ? "," : "", (unsigned)groups[i]);
    }
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

typedef void (*line_fn)(spank_t sp, char *line, void *data);

/*
 * Run argv (as uid/gid/groups when uid is not -1), hand each line of its stdout+stderr to
 * on_line, kill it after timeout_s. Returns its exit status, or -1 when it could not run or
 * was killed; *why then says so.
 */
static int run_helper(spank_t sp, char *const argv[], int timeout_s, uid_t uid, gid_t gid,
                      gid_t *groups, int ngroups, line_fn on_line, void *data, char *why,
                      size_t why_len)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        snprintf(why, why_len, "pipe: %s", strerror(errno));
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(why, why_len, "fork: %s", strerror(errno));
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        static char *const env[] = {"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
                                    "LANG=C.UTF-8", NULL};
        int null = open("/dev/null", O_RDONLY);
        if (null >= 0)
            dup2(null, 0);
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        for (int fd = 3; fd < 1024; fd++)
            close(fd);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        if (uid != (uid_t)-1) {
            if (setgroups((size_t)ngroups, groups) != 0 || setgid(gid) != 0 ||
                setuid(uid) != 0) {
                dprintf(1, "cannot become uid %u: %s\n", (unsigned)uid, strerror(errno));
                _exit(126);
            }
        }
        if (chdir("/") != 0)
            _exit(126);
        execve(argv[0], argv, env);
        dprintf(1, "cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    char buf[GC_TEXT * 2];
    size_t used = 0;
    double deadline = now_s() + timeout_s;
    int killed = 0;
    for (;;) {
        double left = deadline - now_s();
        if (left <= 0) {
            kill(pid, SIGKILL);
            killed = 1;
            break;
        }
        struct pollfd p = {fds[0], POLLIN, 0};
        int r = poll(&p, 1, (int)(left * 1000) + 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            continue;
        ssize_t n = read(fds[0], buf + used, sizeof buf - 1 - used);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        used += (size_t)n;
        char *start = buf, *nl;
        while ((nl = memchr(start, '\n', (size_t)(buf + used - start))) != NULL) {
            *nl = '\0';
            on_line(sp, start, data);
            start = nl + 1;
        }
        used = (size_t)(buf + used - start);
        memmove(buf, start, used);
        if (used == sizeof buf - 1) { /* a line longer than the buffer: dropped */
            used = 0;
        }
    }
    close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (killed) {
        snprintf(why, why_len, "no answer within %d s", timeout_s);
        return -1;
    }
    if (used > 0) {
        buf[used] = '\0';
        on_line(sp, buf, data);
    }
    if (WIFSIGNALED(status))
        snprintf(why, why_len, "killed by signal %d", WTERMSIG(status));
    else if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
        snprintf(why, why_len, "exit status %d", WEXITSTATUS(status));
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* ------------------------------------------------------------------ join */

struct join_result {
    int ready;
    char reason[GC_TEXT];
    char last[GC_TEXT];
};

static void set_env(spank_t sp, const char *name, const char *value, int prepend)
{
    if (!in_list(name, ALLOWED_ENV))
        return;
    char joined[GC_TEXT * 2];
    char old[GC_TEXT];
    if (prepend && spank_getenv(sp, name, old, sizeof old) == ESPANK_SUCCESS && old[0]) {
        snprintf(joined, sizeof joined, "%s:%s", value, old);
        value = joined;
    }
    spank_setenv(sp, name, value, 1);
}

static void join_line(spank_t sp, char *line, void *data)
{
    struct join_result *res = data;
    if (strcmp(line, "ready") == 0) {
        res->ready = 1;
    } else if (strncmp(line, "unmanaged ", 10) == 0) {
        snprintf(res->reason, sizeof res->reason, "%s", line + 10);
    } else if (strncmp(line, "set ", 4) == 0 || strncmp(line, "prepend ", 8) == 0) {
        int prepend = line[0] == 'p';
        char *name = line + (prepend ? 8 : 4);
        char *value = strchr(name, ' ');
        if (value != NULL) {
            *value++ = '\0';
            set_env(sp, name, value, prepend);
        }
    } else if (strncmp(line, "note ", 5) == 0) {
        snprintf(message, sizeof message, "%s", line + 5);
    } else if (line[0] != '\0') {
        snprintf(res->last, sizeof res->last, "%s", line);
    }
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    uint32_t step, node = 0, nnodes_step = 0;
    if (!spank_remote(sp) || step_id(sp, &step) != 0 || step >= GC_MAX_NORMAL_STEP)
        return 0; /* only srun steps: not the batch, extern or interactive step */
    const char *policy = chosen_policy();
    if (policy == NULL)
        return 0;
    uid_t uid;
    gid_t gid;
    uint32_t job;
    gid_t *groups = NULL;
    int ngroups = 0;
    spank_get_item(sp, S_JOB_NODEID, &node);
    spank_get_item(sp, S_JOB_NNODES, &nnodes_step);
    if (spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_GID, &gid) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS) {
        snprintf(message, sizeof message, "greenckpt: node %u unmanaged: the job's ids are not "
                 "available to the plugin", node);
        return 0;
    }
    spank_get_item(sp, S_JOB_SUPPLEMENTARY_GIDS, &groups, &ngroups);
    char s_job[32], s_step[32], s_node[32], s_uid[32], s_gid[32], s_pid[32], s_timeout[32];
    char s_groups[GC_TEXT] = "", cwd[GC_TEXT], nnodes[32];
    snprintf(s_job, sizeof s_job, "%u", job);
    snprintf(s_step, sizeof s_step, "%u", step);
    snprintf(s_node, sizeof s_node, "%u", node);
    snprintf(s_uid, sizeof s_uid, "%u", (unsigned)uid);
    snprintf(s_gid, sizeof s_gid, "%u", (unsigned)gid);
    snprintf(s_pid, sizeof s_pid, "%d", (int)getpid());
    snprintf(s_timeout, sizeof s_timeout, "%d", site_timeout > 5 ? site_timeout - 3 : 2);
    join_groups(s_groups, sizeof s_groups, groups, ngroups);
    submit_dir(sp, cwd, sizeof cwd);
    job_env(sp, "SLURM_JOB_NUM_NODES", nnodes, sizeof nnodes, "");
    if (nnodes[0] == '\0')
        snprintf(nnodes, sizeof nnodes, "%u", nnodes_step);

    char *argv[GC_MAX_ARGS + 2 * GC_MAX_PROFILES + 16];
    int n = 0;
    char *fixed[] = {site_python, "-m", "greenckpt.cli.spank", "join", "--job", s_job,
                     "--step", s_step, "--node", s_node, "--nodes", nnodes, "--uid", s_uid,
                     "--gid", s_gid, "--groups", s_groups, "--report",
                     opt_report[0] ? opt_report : site_report, "--cwd", cwd, "--policy",
                     (char *)policy, "--stepd-pid", s_pid, "--timeout", s_timeout, "--spool",
                     site_spool};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        argv[n++] = fixed[i];
    for (int i = 0; i < site_profile_count; i++) {
        argv[n++] = "--profile";
        argv[n++] = site_profiles[i];
    }
    if (!site_control)
        argv[n++] = "--no-control";
    if (opt_intercept[0]) {
        argv[n++] = "--intercept";
        argv[n++] = opt_intercept;
    }
    int job_argc = 0;
    char **job_argv = NULL;
    argv[n++] = "--";
    if (spank_get_item(sp, S_JOB_ARGV, &job_argc, &job_argv) == ESPANK_SUCCESS)
        for (int i = 0; i < job_argc && i < GC_MAX_ARGS - 1 && job_argv != NULL; i++)
            argv[n++] = job_argv[i];
    argv[n] = NULL;

    struct join_result res;
    memset(&res, 0, sizeof res);
    char why[GC_TEXT] = "";
    int rc = run_helper(sp, argv, site_timeout, (uid_t)-1, 0, NULL, 0, join_line, &res, why,
                        sizeof why);
    if (res.ready) {
        managed = 1;
        return 0;
    }
    (void)rc;
    if (res.reason[0]) /* join's own one-line reason */
        snprintf(message, sizeof message, "greenckpt: node %u unmanaged: %.3900s", node,
                 res.reason);
    else /* the helper's last words, and how it ended */
        snprintf(message, sizeof message, "greenckpt: node %u unmanaged: %.3000s%s%.800s%s", node,
                 res.last[0] ? res.last : "the join helper gave no answer", why[0] ? " (" : "",
                 why, why[0] ? ")" : "");
    slurm_info("%s", message);
    return 0; /* never fail the job: the step runs without greenckpt on this node */
}

/* In each task, as the user, before exec: the first task says why its node is unmanaged. */
int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    int task = -1;
    if (message[0] && spank_get_item(sp, S_TASK_ID, &task) == ESPANK_SUCCESS && task == 0)
        dprintf(2, "%s\n", message);
    return 0;
}

/* ------------------------------------------------------------------ exit */

/* Keeps the helper's last line (what a failure says). */
static void last_line(spank_t sp, char *line, void *data)
{
    (void)sp;
    if (line[0] != '\0')
        snprintf((char *)data, GC_TEXT, "%s", line);
}

/* The batch script ended: the job report, assembled by the helper as the job's user (it
 * gives up root itself, after loading what it needs: the user need not run this Python). */
static void run_report(spank_t sp)
{
    uid_t uid;
    gid_t gid;
    uint32_t job;
    gid_t *groups = NULL;
    int ngroups = 0;
    if (spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_GID, &gid) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS)
        return;
    spank_get_item(sp, S_JOB_SUPPLEMENTARY_GIDS, &groups, &ngroups);
    char s_job[32], s_uid[32], s_gid[32], s_groups[GC_TEXT] = "", cwd[GC_TEXT], nnodes[32];
    snprintf(s_job, sizeof s_job, "%u", job);
    snprintf(s_uid, sizeof s_uid, "%u", (unsigned)uid);
    snprintf(s_gid, sizeof s_gid, "%u", (unsigned)gid);
    join_groups(s_groups, sizeof s_groups, groups, ngroups);
    submit_dir(sp, cwd, sizeof cwd);
    job_env(sp, "SLURM_JOB_NUM_NODES", nnodes, sizeof nnodes, "0");
    char *argv[] = {site_python, "-m", "greenckpt.cli.spank", "report", "--job", s_job,
                    "--template", opt_report[0] ? opt_report : site_report, "--cwd", cwd,
                    "--nodes", nnodes, "--uid", s_uid, "--gid", s_gid, "--groups", s_groups,
                    NULL};
    char why[GC_TEXT] = "", last[GC_TEXT] = "";
    int rc = run_helper(sp, argv, 90, (uid_t)-1, 0, NULL, 0, last_line, last, why, sizeof why);
    if (rc != 0)
        slurm_info("greenckpt: the job report of job %u was not assembled (%.2000s): run "
                   "greenckpt job-report %u",
                   job, why[0] ? why : last, job);
}

int slurm_spank_exit(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    uint32_t step;
    if (!spank_remote(sp) || step_id(sp, &step) != 0)
        return 0;
    if (step == GC_BATCH_STEP) {
        if (chosen_policy() != NULL)
            run_report(sp);
        return 0;
    }
    if (!managed)
        return 0;
    uint32_t job;
    if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS)
        return 0;
    char s_job[32], s_step[32], why[GC_TEXT] = "";
    snprintf(s_job, sizeof s_job, "%u", job);
    snprintf(s_step, sizeof s_step, "%u", step);
    char *argv[] = {site_python, "-m", "greenckpt.cli.spank", "release", "--job", s_job,
                    "--step", s_step, "--spool", site_spool, NULL};
    char last[GC_TEXT] = "";
    if (run_helper(sp, argv, 150, (uid_t)-1, 0, NULL, 0, last_line, last, why, sizeof why) != 0)
        slurm_info("greenckpt: releasing step %u of job %u: %.2000s", step, job,
                   why[0] ? why : last);
    return 0;
}
