/* pm_kjv_prompts.h — the 20 KJV-style prompts the greedy parity tests run
 * (engine, split and server), one list so every placement is checked on
 * the same inputs. Not the benchmark's held-out prompts. */
#ifndef PM_KJV_PROMPTS_H
#define PM_KJV_PROMPTS_H

#define PM_KJV_PROMPTS 20

extern const char *const pm_kjv_prompts[PM_KJV_PROMPTS];

#endif
