// A turn's per-token logprobs as a small inline SVG line (0 at the top, the lowest at the bottom).
const SVG = "http://www.w3.org/2000/svg";
const WIDTH = 160;
const HEIGHT = 24;

export function sparkline(logprobs: number[]): SVGSVGElement {
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("class", "sparkline");
  svg.setAttribute("width", String(WIDTH));
  svg.setAttribute("height", String(HEIGHT));
  svg.setAttribute("viewBox", `0 0 ${WIDTH} ${HEIGHT}`);
  const lowest = Math.min(-1e-6, ...logprobs);
  const step = logprobs.length > 1 ? WIDTH / (logprobs.length - 1) : 0;
  const points = logprobs.map(
    (value, i) => `${(i * step).toFixed(1)},${((value / lowest) * (HEIGHT - 2) + 1).toFixed(1)}`,
  );
  const line = document.createElementNS(SVG, "polyline");
  line.setAttribute("points", points.join(" "));
  svg.append(line);
  const title = document.createElementNS(SVG, "title");
  title.textContent = `${logprobs.length} tokens, lowest logprob ${lowest.toFixed(3)}`;
  svg.append(title);
  return svg;
}
