// A scheduler file that reaches up into the CLI: the checker must refuse it.
#include "cli/commands.hpp"
