/* test_common.c — result strings and dtype helpers. */
#include <string.h>

#include "testutil.h"
#include "zipccl.h"

int main(void) {
    CHECK(!strcmp(zipcclGetErrorString(zipcclSuccess), "success"), "errstr_success", "got %s",
          zipcclGetErrorString(zipcclSuccess));
    int all_named = 1;
    for (int r = 0; r < zipcclNumResults; r++)
        if (!strcmp(zipcclGetErrorString((zipcclResult_t)r), "unknown result code")) all_named = 0;
    CHECK(all_named, "errstr_all_named", "a result code has no string");
    CHECK(!strcmp(zipcclGetErrorString((zipcclResult_t)999), "unknown result code"),
          "errstr_out_of_range", "out-of-range code not flagged");
    CHECK(zipcclTypeSize(zipcclBfloat16) == 2 && zipcclTypeSize(zipcclFloat16) == 2 &&
              zipcclTypeSize(zipcclFloat32) == 4 && zipcclTypeSize((zipcclDataType_t)3) == 0,
          "type_sizes", "wrong sizes");
    return tu_exit();
}
