"""Scripted experts for the Fetch arm: push, pick-and-place and stacking from privileged state."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from ecrl.envs.expert import ObjectByObjectExpert, objects_on, plan_step
from ecrl.envs.fetch import FetchEnv
from ecrl.envs.fetch_scene import FINGER_INNER, FINGER_RANGE, GRIP_TO_TIP, MAX_DISPLACEMENT
from ecrl.envs.layout import AGENT_GRIPPER, ENTITY_FIELDS, ENTITY_PRESENT, GOAL_FIELDS

_E, _G = ENTITY_FIELDS, GOAL_FIELDS
_POS, _SIZE = _E["position"], _E["size"].start
_OPEN = AGENT_GRIPPER.start
_FINGER = 0.015
"""Half width (m) of the closed fingers seen from above: the pushing face's distance from the grip site."""
_CLEAR = 0.025
"""Vertical clearance (m) over everything on the table when the gripper travels."""


class FetchExpert(ObjectByObjectExpert):
    """Scripted expert for every Fetch skill, one object at a time; :attr:`current` is the object it works on.

    - ``pick_place`` and ``stack``: rise above everything, move over the object, open the fingers
      just wider than it, descend, close, lift, carry it over its target (correcting for where in the
      fingers it sits), lower it onto the target (for ``stack``, onto the tower built so far, level by
      level in rank order), open and rise. An in-air target is served last and held there.
    - ``push`` (fingers blocked closed): rise, move over the spot behind the object on the line to its
      target (routed around the other objects), descend to just above the table and push.

    Objects are matched to targets optimally within interchangeable groups, as by the env; the next
    object is the nearest unplaced one (for ``ordered`` goals the next by rank). An object that
    makes no progress for a while is set aside for a while.

    Arguments: as :class:`~ecrl.envs.expert.ObjectByObjectExpert`'s (``env``: a :class:`~ecrl.envs.fetch.FetchEnv`).
    """

    env_type, _drives = FetchEnv, "ecrl Fetch envs"
    env: FetchEnv
    STALL_STEPS = 40
    SET_ASIDE_STEPS = 60
    WANDER_STEPS = 4

    # ------------------------------------------------------------------ choice of object
    def act(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        """Action ``(4,) float32`` in ``[-1, 1]`` for one observation."""
        self.last_random = False
        rows = obs["observation"]
        if rows.ndim != 2:
            raise ValueError(f"act takes one observation, got observation of shape {rows.shape}")
        agent_row = rows[rows[:, _E["is_agent"].start] > 0.5][0]
        grip, opening = agent_row[_POS], float(agent_row[_OPEN])
        objects = np.flatnonzero((rows[:, _E["is_object"].start] > 0.5) & (rows[:, ENTITY_PRESENT] > 0.5))
        n = len(objects)
        pos, sizes = rows[objects][:, _POS], rows[objects, _SIZE]
        desired = obs["desired_goal"][:n]
        targets, ranks = desired[:, _G["position"]], desired[:, _G["rank"].start]
        spec, aim_distance = self.env.spec_, self.tolerance * self.env.distance_threshold
        self._t += 1
        self._phase_t += 1
        i = self._current
        if i is not None and i < n and self._phase in ("carry", "release") and spec.skill != "push":
            pass  # finish putting it down (or keep holding it in the air) even once it counts as placed
        elif i is not None and (i >= n or np.linalg.norm(pos[i] - self._where(targets)) <= aim_distance):
            if i < n and np.linalg.norm(rows[objects[i], _E["velocity"]]) > 0.02:
                return np.zeros(4, dtype=np.float32)  # let it come to rest before judging it placed
            self._switch(None)
        if self._current is None:
            goal_of, cost = self._match(pos, desired)
            todo = cost[np.arange(n), goal_of] > aim_distance
            if not todo.any():
                return np.zeros(4, dtype=np.float32)
            early = self._early(grip, pos, sizes, targets, goal_of) if spec.goal == "ordered" else None
            if early is not None:
                self._switch(early[0])
                self._spot = early[1]
            else:
                self._switch(self._choose(grip, pos, sizes, targets, ranks, goal_of, todo))
                self._goal = int(goal_of[self._current])
        i = self._current
        target = self._where(targets)
        remaining = float(np.linalg.norm(pos[i] - target))
        if remaining > aim_distance and self._stalled(i, remaining):
            self.last_random = True
            return np.concatenate([self._rng.uniform(-1, 1, 3), [1.0]]).astype(np.float32)
        if spec.skill == "push":
            return self._push(grip, i, target[:2], pos, sizes)
        return self._pick_place(grip, opening, i, target, pos, sizes, rows[objects])

    def _where(self, targets: np.ndarray) -> np.ndarray:
        """Where the current object goes: its target, or a spot off a target it filled out of turn."""
        return targets[self._goal] if self._spot is None else self._spot

    def _early(self, grip, pos, sizes, targets, goal_of) -> tuple[int, np.ndarray] | None:
        """``ordered`` goals: an object on a target filled out of turn and a spot off it (privileged fill times)."""
        order, times, done = self.env.target_order, self.env.fill_times, self.env.filled_in_order
        early = [t for t in order[done:] if np.isfinite(times[t])]
        if not early:
            return None
        object_on = objects_on(goal_of)
        i = int(min((object_on[t] for t in early), key=lambda k: np.linalg.norm(pos[k, :2] - grip[:2])))
        target = targets[goal_of[i], :2]
        away = 2.5 * self.env.distance_threshold
        radial = pos[i, :2] - target
        radial = (
            radial / np.linalg.norm(radial)
            if np.linalg.norm(radial) > 1e-3
            else -target / max(np.linalg.norm(target), 1e-9)
        )
        spot = target + radial * away
        if (np.abs(spot) > np.array(self.env.area) / 2 - sizes[i]).any():
            spot = target - target / max(np.linalg.norm(target), 1e-9) * away  # towards the table centre instead
        return i, np.array([spot[0], spot[1], sizes[i]])

    def _choose(self, grip, pos, sizes, targets, ranks, goal_of, todo) -> int:
        """The next object: by rank for ``ordered`` goals and towers, else the nearest (in-air targets last)."""
        n, spec = len(pos), self.env.spec_
        if spec.goal == "ordered" and self.env.filled_in_order < n:
            return int(objects_on(goal_of)[self.env.target_order[self.env.filled_in_order]])
        if spec.skill == "stack":
            return int(min(np.flatnonzero(todo), key=lambda k: ranks[goal_of[k]]))
        in_air = targets[goal_of, 2] > sizes + 0.01
        key = np.linalg.norm(pos[:, :2] - grip[:2], axis=-1) + 1e3 * ~todo + 1e2 * self._aside(n) + 10 * in_air
        return int(np.argmin(key))

    def _switch(self, i: int | None) -> None:
        super()._switch(i)
        self._phase, self._phase_t = "reach", 0
        self._air, self._goal, self._down_t = False, -1, 0
        self._spot: np.ndarray | None = None

    def _go(self, phase: str) -> None:
        self._phase, self._phase_t = phase, 0

    # ------------------------------------------------------------------ motion
    @staticmethod
    def _move(grip: np.ndarray, goal: np.ndarray, travel_z: float, reach: float = 0.015) -> np.ndarray:
        """Aim point towards ``goal`` that first rises to ``travel_z`` when far in the plane."""
        if np.linalg.norm(goal[:2] - grip[:2]) > reach:
            if grip[2] < travel_z - 0.015:
                return np.array([grip[0], grip[1], travel_z + 0.01])
            return np.array([goal[0], goal[1], max(travel_z, goal[2])])
        return goal

    @staticmethod
    def _action(grip: np.ndarray, aim: np.ndarray, fingers: float) -> np.ndarray:
        return np.concatenate([np.clip((aim - grip) / MAX_DISPLACEMENT, -1, 1), [fingers]]).astype(np.float32)

    def _top(self, pos: np.ndarray, sizes: np.ndarray, skip: int) -> float:
        """Height of the highest top among the objects other than ``skip`` (0 for the bare table)."""
        others = np.arange(len(pos)) != skip
        return float(max((pos[others, 2] + sizes[others]).max(initial=0.0), 0.0))

    # ------------------------------------------------------------------ pick and place, stack
    def _pick_place(self, grip, opening, i, target, pos, sizes, rows) -> np.ndarray:
        obj, size = pos[i], sizes[i]
        q = opening * FINGER_RANGE  # each finger's travel
        yaw = np.arctan2(rows[i, _E["yaw"].start], rows[i, _E["yaw"].start + 1])
        half_y = size * (abs(np.cos(yaw)) + abs(np.sin(yaw))) if rows[i, _E["shape"].start] > 0.5 else size
        wide = min(FINGER_RANGE, half_y - FINGER_INNER + 0.012)
        open_cmd = float(np.clip(wide - q, -1, 1))  # finger target = travel + command
        top = self._top(pos, sizes, i)
        grasp_z = max(size, GRIP_TO_TIP + 0.004)
        phase = self._phase
        if phase == "reach":
            # Over every object, the one to grasp included: open fingers reach far beside it.
            travel = max(self._top(pos, sizes, -1) + _CLEAR + GRIP_TO_TIP, grasp_z + 0.02)
            goal = np.array([obj[0], obj[1], travel])
            aim = self._move(grip, goal, travel, reach=0.006)
            if np.linalg.norm(goal[:2] - grip[:2]) < 0.006 and q > wide - 0.006:
                self._go("descend")
            return self._action(grip, aim, open_cmd)
        if phase == "descend":
            goal = np.array([obj[0], obj[1], grasp_z])
            if np.linalg.norm(goal[:2] - grip[:2]) > 0.015:
                self._go("reach")
            elif abs(grip[2] - grasp_z) < 0.006 or self._phase_t > 12:
                self._go("grasp")
            return self._action(grip, goal, open_cmd)
        if phase == "grasp":
            if self._phase_t >= 5:
                if q > 0.005 and np.linalg.norm(obj - grip) < size + 0.02:
                    self._go("carry")
                    self._air = self.env.spec_.skill == "pick_place" and target[2] > size + 0.01
                else:
                    self._go("reach")
            return self._action(grip, np.array([obj[0], obj[1], grasp_z]), -1.0)
        offset = grip - obj  # where the object sits in the fingers
        if phase == "carry":
            if np.linalg.norm(offset) > size + 0.03:  # dropped
                self._go("reach")
                return self._action(grip, grip, open_cmd)
            carry_travel = top + _CLEAR + size + offset[2]
            err = target - obj
            goal = target + offset
            if np.linalg.norm(err[:2]) > 0.004 and err[2] < -0.004:
                goal[2] += 0.015  # line it up in the air, then go straight down
            aim = self._move(grip, goal, carry_travel, reach=0.01)
            settled = np.linalg.norm(rows[i, _E["velocity"]]) < 0.05
            down = np.linalg.norm(err[:2]) < 0.015 and abs(err[2]) < 0.008
            self._down_t = self._down_t + 1 if down else 0
            aligned = np.linalg.norm(err[:2]) < 0.005 and settled
            if not self._air and down and (aligned or self._down_t > 10):
                self._go("release")
            return self._action(grip, aim, -1.0)
        if phase == "release":
            if self._phase_t > 4:
                self._go("retreat")
            return self._action(grip, grip, open_cmd)
        # retreat: straight up, then the next object
        if grip[2] > max(obj[2] + size, 0) + _CLEAR + GRIP_TO_TIP or self._phase_t > 10:
            self._switch(None)
        return self._action(grip, np.array([grip[0], grip[1], grip[2] + 0.05]), open_cmd)

    # ------------------------------------------------------------------ push
    def _push(self, grip, i, target, pos, sizes) -> np.ndarray:
        obj, size = pos[i, :2], sizes[i]
        remaining = np.linalg.norm(target - obj)
        others = np.arange(len(pos)) != i
        way = plan_step(obj, target, pos[others, :2], sizes[others] + size + 0.005)
        u = (way - obj) / max(np.linalg.norm(way - obj), 1e-9)
        perp = np.array([-u[1], u[0]])
        contact = size + _FINGER
        push_z = GRIP_TO_TIP + 0.006
        rel = grip[:2] - obj
        along, lateral = rel @ u, rel @ perp
        low = grip[2] < push_z + 0.015
        if low and along < -0.7 * contact and abs(lateral) < 0.5 * size and np.linalg.norm(rel) < contact + 0.02:
            # Slowly near the target: a pushed object (a sphere above all) runs on after contact ends.
            aim_xy = obj - u * contact + u * min(remaining, 0.02 if remaining > 0.06 else 0.008)
            return self._action(grip, np.array([*aim_xy, push_z]), 0.0)
        spot = obj - u * (contact + 0.012)
        travel = self._top(pos, sizes, -1) + _CLEAR + GRIP_TO_TIP
        near = low and np.linalg.norm(spot - grip[:2]) < 0.02 and along < 0  # already behind it: no need to rise
        aim = self._move(grip, np.array([*spot, push_z]), travel, reach=0.02 if near else 0.008)
        return self._action(grip, aim, 0.0)


def measure_fetch_expert(skill: str, goal: str, n_objects: int, episodes: int, seed: int, settle_steps: int) -> dict:
    """Success (with a 95% Wilson interval), fraction placed and length of :class:`FetchExpert` episodes of one
    (skill, goal, N), seeds ``seed + e``.

    An episode ends at its first success or at truncation; a solved one then runs ``settle_steps``
    more expert steps (it lets go and rises) and is *lost* if it is no longer solved then.
    """
    from ecrl.envs import FETCH_IDS, SKILLS  # the registry imports this module
    from ecrl.reporting import wilson_interval

    env = gym.make(FETCH_IDS[SKILLS.index(skill)], n_objects=n_objects, goal=goal)
    success, placed, lengths, failed, lost = [], [], [], [], []
    for e in range(episodes):
        obs, info = env.reset(seed=seed + e)
        expert = FetchExpert(env, seed=seed + e)
        for t in range(env.unwrapped.spec_.max_steps):  # noqa: B007 (t is the length below)
            obs, _, terminated, truncated, info = env.step(expert.act(obs))
            if info["is_success"] or terminated or truncated:
                break
        success.append(info["is_success"])
        placed.append(info["fraction_placed"])
        lengths.append(t + 1)
        if not info["is_success"]:
            failed.append(seed + e)
            continue
        for _ in range(settle_steps):  # the expert lets go and backs off: does the scene stay solved?
            obs, _, _, _, info = env.step(expert.act(obs))
        if not info["is_success"]:
            lost.append(seed + e)
    env.close()
    k = int(sum(success))
    return {
        "skill": skill,
        "goal": goal,
        "n_objects": n_objects,
        "episodes": episodes,
        "successes": k,
        "success_rate": k / episodes,
        "ci95": list(wilson_interval(k, episodes)),
        "fraction_placed": float(np.mean(placed)),
        "mean_length": float(np.mean(lengths)),
        "failed_seeds": failed,
        "still_solved_after": {"steps": settle_steps, "episodes": k - len(lost), "lost_seeds": lost},
    }
