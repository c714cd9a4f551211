from benchmarks.host_speed import Sample, episodes


def at(seconds: float, wall_s: float) -> Sample:
    return Sample(seconds, wall_s, wall_s, 0)


def test_slow_samples_close_together_are_one_episode_and_a_gap_starts_another():
    samples = [at(t * 0.5, 0.010) for t in range(20)]
    samples[4], samples[5], samples[6] = at(2.0, 0.015), at(2.5, 0.019), at(3.0, 0.014)  # one episode, 1.4-1.9x
    samples[15] = at(7.5, 0.016)  # 4.5 s later: another
    samples[10] = at(5.0, 0.012)  # 1.2x: not slow
    found = episodes(samples, slow=1.3, gap_s=4.0)
    assert [[s.at_s for s in run] for run in found] == [[2.0, 2.5, 3.0], [7.5]]
