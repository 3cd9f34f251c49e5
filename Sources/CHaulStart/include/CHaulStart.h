#ifndef CHAULSTART_H
#define CHAULSTART_H

// Nothing to call: the target's constructor runs by itself when `haul` starts (start.c).

#endif
