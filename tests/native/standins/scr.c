/* libscr.so stand-in: SCR 3.x's public calls, logged, with distinctive results and errno.
 * A dataset named "bad..." is refused; files are routed under $STANDIN_DIR. */
#include <errno.h>
#include <string.h>

#include "standins.h"

int SCR_Init(void) {
    STANDIN_LOG("SCR_Init");
    return SCR_SUCCESS;
}

int SCR_Finalize(void) {
    STANDIN_LOG("SCR_Finalize");
    return SCR_SUCCESS;
}

int SCR_Route_file(const char *name, char *file) {
    STANDIN_ROUTE(file, name);
    STANDIN_LOG("SCR_Route_file %s", name);
    errno = 200;
    return SCR_SUCCESS;
}

int SCR_Have_restart(int *flag, char *name) {
    *flag = 1;
    strcpy(name, "ckpt.7");
    STANDIN_LOG("SCR_Have_restart");
    return SCR_SUCCESS;
}

int SCR_Start_restart(char *name) {
    strcpy(name, "ckpt.7");
    STANDIN_LOG("SCR_Start_restart");
    errno = 201;
    return SCR_SUCCESS;
}

int SCR_Complete_restart(int valid) {
    STANDIN_LOG("SCR_Complete_restart %d", valid);
    errno = 202;
    return valid ? SCR_SUCCESS : 1;
}

int SCR_Start_checkpoint(void) {
    STANDIN_LOG("SCR_Start_checkpoint");
    errno = 203;
    return SCR_SUCCESS;
}

int SCR_Complete_checkpoint(int valid) {
    STANDIN_LOG("SCR_Complete_checkpoint %d", valid);
    errno = 204;
    return valid ? SCR_SUCCESS : 1;
}

int SCR_Start_output(const char *name, int flags) {
    STANDIN_LOG("SCR_Start_output %s %d", name, flags);
    errno = 205;
    return strncmp(name, "bad", 3) == 0 ? 1 : SCR_SUCCESS;
}

int SCR_Complete_output(int valid) {
    STANDIN_LOG("SCR_Complete_output %d", valid);
    errno = 206;
    return valid ? SCR_SUCCESS : 1;
}
