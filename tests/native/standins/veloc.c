/* libveloc-client.so stand-in: VeloC's public calls, logged, with distinctive results and
 * errno. VELOC_Checkpoint and VELOC_Restart are made of the begin/end calls, called through
 * their exported symbols (so a nested call reaches the interposer). A negative version is
 * refused; files are routed under $STANDIN_DIR. */
#include <errno.h>
#include <string.h>

#include "standins.h"

int VELOC_Init(MPI_Comm comm, const char *cfg_file) {
    STANDIN_LOG("VELOC_Init %s world=%d", cfg_file, comm == MPI_COMM_WORLD);
    errno = 300;
    return VELOC_SUCCESS;
}

int VELOC_Finalize(int cleanup) {
    STANDIN_LOG("VELOC_Finalize %d", cleanup);
    return VELOC_SUCCESS;
}

int VELOC_Mem_protect(int id, void *ptr, size_t count, size_t base_size) {
    STANDIN_LOG("VELOC_Mem_protect %d %d %zu %zu", id, ptr != NULL, count, base_size);
    errno = 301;
    return VELOC_SUCCESS;
}

int VELOC_Mem_unprotect(int id) {
    STANDIN_LOG("VELOC_Mem_unprotect %d", id);
    errno = 302;
    return VELOC_SUCCESS;
}

int VELOC_Route_file(const char *original, char *routed) {
    STANDIN_ROUTE(routed, original);
    STANDIN_LOG("VELOC_Route_file %s", original);
    errno = 303;
    return VELOC_SUCCESS;
}

int VELOC_Checkpoint_begin(const char *name, int version) {
    STANDIN_LOG("VELOC_Checkpoint_begin %s %d", name, version);
    errno = 304;
    return version < 0 ? VELOC_FAILURE : VELOC_SUCCESS;
}

int VELOC_Checkpoint_mem(void) {
    STANDIN_LOG("VELOC_Checkpoint_mem");
    return VELOC_SUCCESS;
}

int VELOC_Checkpoint_end(int success) {
    STANDIN_LOG("VELOC_Checkpoint_end %d", success);
    errno = 305;
    return success ? VELOC_SUCCESS : VELOC_FAILURE;
}

int VELOC_Checkpoint(const char *name, int version) {
    int result = VELOC_Checkpoint_begin(name, version);
    if (result == VELOC_SUCCESS) result = VELOC_Checkpoint_mem();
    result = VELOC_Checkpoint_end(result == VELOC_SUCCESS);
    STANDIN_LOG("VELOC_Checkpoint %s %d", name, version);
    errno = 306;
    return result;
}

int VELOC_Restart_test(const char *name, int version) {
    STANDIN_LOG("VELOC_Restart_test %s %d", name, version);
    return 2;
}

int VELOC_Restart_begin(const char *name, int version) {
    STANDIN_LOG("VELOC_Restart_begin %s %d", name, version);
    errno = 307;
    return version < 0 ? VELOC_FAILURE : VELOC_SUCCESS;
}

int VELOC_Recover_mem(void) {
    STANDIN_LOG("VELOC_Recover_mem");
    return VELOC_SUCCESS;
}

int VELOC_Restart_end(int success) {
    STANDIN_LOG("VELOC_Restart_end %d", success);
    errno = 308;
    return success ? VELOC_SUCCESS : VELOC_FAILURE;
}

int VELOC_Restart(const char *name, int version) {
    int result = VELOC_Restart_begin(name, version);
    if (result == VELOC_SUCCESS) result = VELOC_Recover_mem();
    result = VELOC_Restart_end(result == VELOC_SUCCESS);
    STANDIN_LOG("VELOC_Restart %s %d", name, version);
    errno = 309;
    return result;
}
