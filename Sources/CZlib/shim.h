// The system's zlib (Debian: zlib1g-dev), for reading gzipped exports.
#include <zlib.h>
