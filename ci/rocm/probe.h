/*
 * probe.h: what the probes of ci/rocm (hsakmt-probe.c, hsa-probe.c, hip-probe.cpp) share: their
 * step protocol, the byte patterns they check buffers with, and the hold in which criu dumps and
 * restores them. C and C++; each probe is one translation unit that includes it once.
 *
 * The protocol the vm-lane scenarios read: a probe runs one step after another and prints
 * "STEP <name> ok[: details]" for each; the first step that fails prints "STOP <name>: <what>"
 * and the probe exits 2 (1: bad usage). With a step time limit (probe_start), a step that does
 * not finish in time (a copy the simulated GPU never completes) prints
 * "STOP <name>: no completion within N s" from the alarm and the probe exits 3.
 */
#ifndef ROCM_PROBE_H
#define ROCM_PROBE_H

#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static const char *volatile probe_step_name = "start";
/* Seconds each step may take; 0: no limit. */
static unsigned probe_step_seconds;

static inline void probe_on_alarm(int sig)
{
    (void)sig;
    const char *name = probe_step_name;
    char line[160];
    int n = snprintf(line, sizeof(line), "STOP %s: no completion within %u s\n", name,
                     probe_step_seconds);
    if (n > 0 && write(STDOUT_FILENO, line, (size_t)n) < 0)
        _exit(4);
    _exit(3);
}

/* Line-buffered output; with step_seconds > 0, each step ends in the alarm's STOP after that.
 * PROBE_STEP_SECONDS in the environment, a positive number, replaces step_seconds (a guest whose
 * runtime takes longer to load under emulation: HIP 6.4 with its compiler libraries). */
static inline void probe_start(unsigned step_seconds)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *env = getenv("PROBE_STEP_SECONDS");
    if (env && step_seconds) {
        char *end;
        unsigned long v = strtoul(env, &end, 10);
        if (*env && !*end && v > 0 && v < 86400)
            step_seconds = (unsigned)v;
    }
    probe_step_seconds = step_seconds;
    if (step_seconds)
        signal(SIGALRM, probe_on_alarm);
}

/* The next step: its name in STEP and STOP lines, and a new time limit. */
static inline void step(const char *name)
{
    probe_step_name = name;
    if (probe_step_seconds)
        alarm(probe_step_seconds);
}

static inline void ok(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void ok(const char *fmt, ...)
{
    va_list ap;
    const char *name = probe_step_name;
    printf("STEP %s ok", name);
    if (fmt && *fmt) {
        printf(": ");
        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
    }
    printf("\n");
    fflush(stdout);
}

static inline void stop(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static inline void stop(const char *fmt, ...)
{
    va_list ap;
    const char *name = probe_step_name;
    printf("STOP %s: ", name);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    exit(2);
}

/* The byte at offset i of a buffer filled with pattern `seed`. */
static inline uint8_t pattern(uint32_t seed, size_t i)
{
    uint32_t x = seed * 2654435761u + (uint32_t)i * 40503u;
    return (uint8_t)(x ^ (x >> 13) ^ (x >> 24));
}

static inline void fill(void *p, size_t n, uint32_t seed)
{
    uint8_t *b = (uint8_t *)p;
    for (size_t i = 0; i < n; i++)
        b[i] = pattern(seed, i);
}

/* The offset of the first byte that differs from the pattern, or -1. */
static inline long check(const void *p, size_t n, uint32_t seed)
{
    const volatile uint8_t *b = (const volatile uint8_t *)p;
    for (size_t i = 0; i < n; i++)
        if (b[i] != pattern(seed, i))
            return (long)i;
    return -1;
}

static inline void check_or_stop(const char *what, const void *p, size_t n, uint32_t seed)
{
    long at = check(p, n, seed);
    if (at >= 0)
        stop("%s: byte %ld is %#x, not %#x", what, at, ((const volatile uint8_t *)p)[at],
             pattern(seed, (size_t)at));
}

/* The hold (--hold FILE) of the current step: prints "HOLDING <pid>" and waits, with no time
 * limit, until FILE exists; criu dumps and restores the probe meanwhile. The step's time limit
 * starts anew when it returns. */
static inline void hold_until(const char *file)
{
    if (probe_step_seconds)
        alarm(0);
    printf("HOLDING %d\n", (int)getpid());
    fflush(stdout);
    while (access(file, F_OK))
        usleep(100 * 1000);
    if (probe_step_seconds)
        alarm(probe_step_seconds);
}

#endif
