// A protocol file that reaches into the runner (protocol depends on core only): refused.
#include "isolate/isolate.hpp"
