/**
 * Replay of a finished stream at 1×, 10× or max speed from the recorded receipt times, through
 * the same output renderer as live (output.js); the chart shows where the replay is.
 */
import { getText } from "../dom.js";
import { fmtDuration } from "./format.js";
import { fmt, t } from "../i18n.js";

const UNTIMED_STEP_US = 10_000; // imports keep no receipt times: replay them at 10 ms an event

export class Replay {
  /** `url`: the page config's replay.json; `renderer`: the live output's (output.js). */
  constructor(url, renderer, chart) {
    this.url = url;
    this.renderer = renderer;
    this.chart = chart;
    this.data = null;
    this.frame = 0;
    this.bind();
  }

  /** (Re)attach to the controls: a live page re-renders the header that holds them. */
  bind() {
    this.button = document.getElementById("replay-btn");
    this.speed = document.getElementById("replay-speed");
    this.state = document.getElementById("replay-state");
    this.container = document.getElementById("output-items");
    if (this.button && !this.button.dataset.bound) {
      this.button.dataset.bound = "1";
      this.button.addEventListener("click", () => (this.frame ? this.stop("stopped") : this.start()));
    }
  }

  async start() {
    this.button.disabled = true;
    try {
      this.data ??= JSON.parse(await getText(this.url));
    } finally {
      this.button.disabled = false;
    }
    const { events, targets } = this.data;
    if (!events.length) {
      this.state.textContent = t("nothing to replay");
      return;
    }
    this.container = document.getElementById("output-items");
    this.saved = [...this.container.childNodes];
    this.renderer.attach(this.container);
    this.renderer.reset();
    const timed = this.data.timed;
    const times = events.map((e, i) => (timed ? e[0] : i * UNTIMED_STEP_US));
    const t0 = times[0];
    const speed = Number(this.speed.value);
    const span = times.at(-1) - t0;
    const perFrame = Math.max(20, Math.ceil(events.length / 90)); // max speed: ~1.5 s of frames
    let i = 0;
    const started = performance.now();
    this.button.textContent = t("■ Stop");
    this.button.classList.add("playing");
    const step = () => {
      const elapsedUs = (performance.now() - started) * 1000;
      const limit = speed ? t0 + elapsedUs * speed : Infinity;
      const stop = speed ? events.length : Math.min(events.length, i + perFrame);
      while (i < stop && times[i] <= limit) {
        const e = events[i];
        if (e.length === 3) {
          const [type, oi, ci, si] = targets[e[1]];
          this.renderer.apply({ type, output_index: oi, content_index: ci, summary_index: si, delta: e[2] });
        } else {
          this.renderer.apply(e[1]);
        }
        i++;
      }
      this.renderer.flush();
      const at = times[Math.max(0, i - 1)];
      if (timed) this.chart.setReplay(at / 1000);
      const values = { at: fmtDuration((at - t0) / 1000), span: fmtDuration(span / 1000), speed };
      const progress = speed
        ? fmt(t("replaying at %(speed)s×: %(at)s of %(span)s"), values)
        : fmt(t("replaying at max speed: %(at)s of %(span)s"), values);
      this.state.textContent = progress + (timed ? "" : t(" (no recorded timing: 10 ms an event)"));
      if (i < events.length) this.frame = requestAnimationFrame(step);
      else this.stop("finished", performance.now() - started);
    };
    this.frame = requestAnimationFrame(step);
  }

  stop(how, wallMs) {
    cancelAnimationFrame(this.frame);
    this.frame = 0;
    this.renderer.finish();
    // The final rendering (with rewrite diffs and everything only the whole stream shows).
    this.container.replaceChildren(...this.saved);
    this.chart.setReplay(null);
    this.button.textContent = t("▶ Replay");
    this.button.classList.remove("playing");
    this.state.textContent =
      how === "finished" ? fmt(t("replay finished in %(duration)s"), { duration: fmtDuration(wallMs) }) : t("replay stopped");
  }
}
