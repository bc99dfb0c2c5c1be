"""Procedural drawing of MedAD-Synth images: six modalities, seven anatomies, five lesion types.

Each image is a 128x128 numpy canvas built from soft ellipses, bands and smooth noise, so that a modality
(grey X-ray projection, black-framed CT slice, T2-like MRI with bright fluid, speckled ultrasound fan, orange
fundus photograph, skin-toned dermoscopy field) and an anatomy are recognisable at the 112x112 input of a
tiny model. A lesion changes the pixels inside its box only, by an amount set by its difficulty; its box is
measured from the drawn mask, never assumed. The background, the lesions and the acquisition noise use
separate random streams of one scene seed, so the same scene drawn without its lesions differs from it only
inside the lesion boxes (the tests rely on this).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw

SIZE = 128
"""Side of every original image, in pixels."""

ANATOMIES_BY_MODALITY: dict[str, tuple[str, ...]] = {
    "X-ray": ("chest", "knee"),
    "CT": ("brain", "chest", "abdomen"),
    "MRI": ("brain", "knee", "breast"),
    "ultrasound": ("abdomen", "breast"),
    "fundus photography": ("retina",),
    "dermoscopy": ("skin",),
}
"""Which anatomies each modality is drawn for."""

MODALITIES = tuple(ANATOMIES_BY_MODALITY)
ANATOMIES = ("chest", "knee", "brain", "abdomen", "breast", "retina", "skin")
COLOUR_MODALITIES = ("fundus photography", "dermoscopy")

LESION_KINDS = ("nodule", "mass", "cyst", "abscess", "calcification")
"""Lesion types; each has its own look (see :func:`lesion_appearance`)."""

QUADRANTS = ("left upper", "right upper", "left lower", "right lower")
"""Lesion locations; left and right are the image's as displayed."""

DIFFICULTIES: dict[str, tuple[float, float, float, str]] = {
    "easy": (11.0, 14.0, 0.40, "large"),
    "medium": (7.0, 10.0, 0.26, "medium-sized"),
    "hard": (4.0, 6.0, 0.16, "small"),
}
"""difficulty -> (min radius px, max radius px, intensity change, size word) of the ``realistic`` setting: smaller
and fainter is harder."""

SETTINGS: dict[str, dict[str, tuple[float, float, float, str]]] = {
    "visible": {"visible": (12.0, 14.0, 0.55, "large")},
    "realistic": DIFFICULTIES,
}
"""Lesion settings -> their difficulty levels. ``visible`` (the default, and the CPU demo's): every lesion large and
contrasted, its kind told by shape and texture (a smooth disc, a lobulated textured mass, a dark disc, a ring, a
cluster of dots), at one place per quadrant (a few pixels of jitter), so that a 1.5M-parameter model trained for
minutes on 16 image tokens can see it and learn its box. ``realistic``: three levels down to 4-px, low-contrast
lesions anywhere in their quadrant, the harder setting kept for research (the demo model stays at chance on it)."""

_BRIGHT_DARK: dict[str, tuple[str, str]] = {
    "X-ray": ("radiopaque", "radiolucent"),
    "CT": ("hyperdense", "hypodense"),
    "MRI": ("hyperintense", "hypointense"),
    "ultrasound": ("hyperechoic", "hypoechoic"),
    "fundus photography": ("bright", "dark"),
    "dermoscopy": ("light", "dark"),
}
"""The modality's words for brighter / darker than the surrounding tissue."""

_Y, _X = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32)


@dataclass(frozen=True)
class Lesion:
    """One drawn lesion: type, quadrant, centre and radius in original pixels, intensity change."""

    kind: str
    quadrant: str
    cx: float
    cy: float
    radius: float
    contrast: float
    bold: bool = False  # the visible setting: shape and texture cues exaggerated (see SETTINGS)


@dataclass(frozen=True)
class Scene:
    """Everything that determines one image; drawing the same scene twice gives the same pixels."""

    modality: str
    anatomy: str
    lesions: tuple[Lesion, ...]
    seed: int


def lesion_appearance(kind: str, modality: str) -> list[str]:
    """The descriptors a reader would use for ``kind`` on ``modality`` (what :func:`draw` really shows)."""
    bright, dark = _BRIGHT_DARK[modality]
    return {
        "nodule": [bright, "well-defined", "round"],
        "mass": [bright, "irregular", "lobulated"],
        "cyst": [dark, "well-defined", "round"],
        "abscess": ["ring-shaped", f"{bright} rim", f"{dark} centre"],
        "calcification": ["markedly " + bright, "punctate", "clustered"],
    }[kind]


def place_lesion(rng: np.random.Generator, kind: str, quadrant: str, difficulty: str) -> Lesion:
    """A lesion of ``difficulty`` whose whole extent stays inside ``quadrant`` and near the image centre.

    The centre is offset from the midlines by more than the lesion's largest radius (lobules included), so
    the quadrant is unambiguous, and by at most 26 px, so that it lands on tissue in every anatomy.
    """
    sx = -1.0 if quadrant.startswith("left") else 1.0
    sy = -1.0 if quadrant.endswith("upper") else 1.0
    c = SIZE / 2
    if difficulty == "visible":  # one place per quadrant, 26 px from both midlines, up to 3 px of jitter
        r_min, r_max, contrast, _ = SETTINGS["visible"]["visible"]
        radius = float(rng.uniform(r_min, r_max))
        dx, dy = 26.0 + rng.uniform(-3.0, 3.0, size=2)
        return Lesion(kind, quadrant, c + sx * float(dx), c + sy * float(dy), radius, contrast, bold=True)
    r_min, r_max, contrast, _ = DIFFICULTIES[difficulty]
    radius = float(rng.uniform(r_min, r_max))
    lo = 1.35 * radius + 2.0
    dx, dy = rng.uniform(lo, max(lo, 26.0), size=2)
    return Lesion(kind, quadrant, c + sx * float(dx), c + sy * float(dy), radius, contrast)


def _disc(cx: float, cy: float, rx: float, ry: float | None = None, edge: float = 1.0) -> np.ndarray:
    """Anti-aliased filled ellipse in [0, 1]; ``edge`` widens the soft border (pixels)."""
    ry = rx if ry is None else ry
    d = np.sqrt(((_X - cx) / rx) ** 2 + ((_Y - cy) / ry) ** 2)
    return np.clip((1.0 - d) * min(rx, ry) / edge + 0.5, 0.0, 1.0)


def _smooth_noise(rng: np.random.Generator, cells: int, amplitude: float) -> np.ndarray:
    """Low-frequency texture: ``cells x cells`` random values upsampled bicubically to the canvas."""
    small = rng.standard_normal((cells, cells)).astype(np.float32)
    up = Image.fromarray(small).resize((SIZE, SIZE), Image.Resampling.BICUBIC)
    return np.asarray(up, dtype=np.float32) * amplitude


def _blur(a: np.ndarray, sigma: float) -> np.ndarray:
    """Separable Gaussian blur of a 2-D float array (edges padded by reflection)."""
    half = max(1, int(3 * sigma + 0.5))
    k = np.exp(-0.5 * (np.arange(-half, half + 1) / sigma) ** 2)
    k = (k / k.sum()).astype(np.float32)
    for axis in (0, 1):
        padded = np.pad(a, [(half, half) if ax == axis else (0, 0) for ax in (0, 1)], mode="reflect")
        a = np.lib.stride_tricks.sliding_window_view(padded, len(k), axis=axis) @ k
    return a.astype(np.float32)


def _lines(segments: list[list[tuple[float, float]]], width: int) -> np.ndarray:
    """Polylines drawn as a [0, 1] mask (vessels, hairs, ribs)."""
    canvas = Image.new("L", (SIZE, SIZE), 0)
    pen = ImageDraw.Draw(canvas)
    for pts in segments:
        pen.line(pts, fill=255, width=width)
    return np.asarray(canvas, dtype=np.float32) / 255.0


def _paint(img: np.ndarray, mask: np.ndarray, value: float) -> np.ndarray:
    return img * (1.0 - mask) + value * mask


# --- backgrounds: one function per (modality, anatomy); grey ones return HxW, colour ones HxWx3 -----------


def _xray_chest(rng: np.random.Generator) -> np.ndarray:
    img = 0.55 + _smooth_noise(rng, 4, 0.03)
    lungs = np.maximum(_disc(40, 62, 23, 40, 3), _disc(88, 62, 23, 40, 3))
    img = _paint(img, lungs, 0.32)
    ribs = _lines([[(x, 22 + 12 * k + 0.006 * (x - 64) ** 2) for x in range(10, 120, 6)] for k in range(7)], 2)
    img += 0.10 * ribs * lungs
    img = _paint(img, np.clip(1 - np.abs(_X - 64) / 6, 0, 1), 0.82)  # spine
    img = _paint(img, _disc(72, 88, 18, 16, 3), 0.62)  # heart
    return _paint(img, np.clip((_Y - 104) / 4, 0, 1), 0.7)  # diaphragm


def _xray_knee(rng: np.random.Generator) -> np.ndarray:
    img = 0.22 + _smooth_noise(rng, 4, 0.02)
    img = _paint(img, np.clip(1 - np.abs(_X - 64) / 42, 0, 1) ** 0.3, 0.36)  # soft tissue of the leg
    femur = np.maximum(np.clip((14 - np.abs(_X - 64)) / 2, 0, 1) * (_Y < 56), _disc(64, 56, 26, 9, 2))
    tibia = np.maximum(np.clip((13 - np.abs(_X - 64)) / 2, 0, 1) * (_Y > 72), _disc(64, 72, 27, 6, 2))
    img = _paint(img, femur, 0.8)
    img = _paint(img, tibia, 0.78)
    return _paint(img, _disc(64, 64, 28, 2, 1) * (1 - tibia) * (1 - femur), 0.3)  # joint space


def _ct_brain(rng: np.random.Generator) -> np.ndarray:
    head = _disc(64, 64, 50, 58, 1)
    img = _paint(np.zeros((SIZE, SIZE), np.float32), head, 0.95)  # skull
    img = _paint(img, _disc(64, 64, 45, 53, 1), 0.46 + _smooth_noise(rng, 6, 0.03))
    img = _paint(img, np.maximum(_disc(56, 60, 4, 12, 1), _disc(72, 60, 4, 12, 1)), 0.15)  # ventricles
    return img


def _ct_body(rng: np.random.Generator, rx: float, ry: float) -> np.ndarray:
    img = _paint(np.zeros((SIZE, SIZE), np.float32), _disc(64, 64, rx, ry, 1), 0.3)  # subcutaneous fat
    return _paint(img, _disc(64, 64, rx - 4, ry - 4, 1), 0.47 + _smooth_noise(rng, 6, 0.02))


def _ct_chest(rng: np.random.Generator) -> np.ndarray:
    img = _ct_body(rng, 60, 50)
    img = _paint(img, np.maximum(_disc(38, 58, 21, 30, 2), _disc(90, 58, 21, 30, 2)), 0.2)  # lungs
    img = _paint(img, _disc(68, 62, 14, 12, 1), 0.55)  # heart
    return _paint(img, _disc(64, 98, 7, 7, 1), 0.95)  # vertebra


def _ct_abdomen(rng: np.random.Generator) -> np.ndarray:
    img = _ct_body(rng, 60, 48)
    img = _paint(img, _disc(40, 58, 26, 22, 2), 0.58)  # liver
    img = _paint(img, np.maximum(_disc(44, 86, 7, 10, 1), _disc(84, 86, 7, 10, 1)), 0.62)  # kidneys
    bowel = np.clip(_smooth_noise(rng, 12, 1.5), 0, 1) * _disc(84, 58, 18, 16, 4)
    img = _paint(img, bowel, 0.36)  # mottled bowel loops (no round gas bubbles a cyst could be taken for)
    return _paint(img, _disc(64, 96, 7, 7, 1), 0.95)  # vertebra


def _mri_brain(rng: np.random.Generator) -> np.ndarray:
    img = _paint(np.zeros((SIZE, SIZE), np.float32), _disc(64, 64, 50, 58, 1), 0.8)  # scalp fat
    img = _paint(img, _disc(64, 64, 47, 55, 1), 0.05)  # skull: no signal
    img = _paint(img, _disc(64, 64, 44, 52, 1), 0.52 + _smooth_noise(rng, 8, 0.03))  # grey matter
    img = _paint(img, _disc(64, 64, 34, 42, 4), 0.38)  # white matter
    return _paint(img, np.maximum(_disc(56, 60, 4, 12, 1), _disc(72, 60, 4, 12, 1)), 0.92)  # CSF


def _mri_knee(rng: np.random.Generator) -> np.ndarray:
    img = _paint(np.zeros((SIZE, SIZE), np.float32), np.clip((46 - np.abs(_X - 62)) / 2, 0, 1), 0.34)
    img += _smooth_noise(rng, 6, 0.02) * (img > 0)
    femur = np.maximum(np.clip((18 - np.abs(_X - 60)) / 2, 0, 1) * (_Y < 50), _disc(60, 50, 22, 14, 2))
    img = _paint(img, femur, 0.74)  # fatty marrow
    img = _paint(img, np.clip((16 - np.abs(_X - 60)) / 2, 0, 1) * (_Y > 70), 0.72)  # tibia
    img = _paint(img, _disc(60, 70, 24, 5, 1), 0.72)
    img = _paint(img, _disc(60, 65, 25, 2, 1) * (1 - femur), 0.9)  # joint fluid
    return _paint(img, _disc(96, 48, 5, 12, 1), 0.6)  # patella


def _mri_breast(rng: np.random.Generator) -> np.ndarray:
    img = _paint(np.zeros((SIZE, SIZE), np.float32), np.clip((26 - _Y) / 2, 0, 1), 0.25)  # chest wall
    breasts = np.maximum(_disc(36, 30, 28, 76, 2), _disc(92, 30, 28, 76, 2)) * (_Y > 24)
    img = _paint(img, breasts, 0.78)  # fat
    glands = np.clip(_smooth_noise(rng, 10, 1.0), 0, 1) * np.maximum(_disc(36, 40, 18, 56, 4),
                                                                     _disc(92, 40, 18, 56, 4)) * (_Y > 28)
    return _paint(img, glands * 0.7, 0.38)


def _us_field() -> np.ndarray:
    """The fan of a convex ultrasound probe whose apex sits above the image."""
    r = np.sqrt((_X - 64) ** 2 + (_Y + 50) ** 2)
    angle = np.degrees(np.arctan2(_X - 64, _Y + 50))
    return (np.clip((44 - np.abs(angle)) / 1.5, 0, 1) * np.clip((r - 58) / 1.5, 0, 1)).astype(np.float32)


def _us_abdomen(rng: np.random.Generator) -> np.ndarray:
    img = 0.45 + _smooth_noise(rng, 5, 0.04)
    y0, tilt = rng.uniform(40, 90), rng.uniform(-0.3, 0.3)
    vessel = _lines([[(float(x), float(y0 + tilt * (x - 64) + 6 * math.sin(x / 14))) for x in range(0, 129, 8)]], 5)
    img = _paint(img, vessel, 0.08)  # a portal vein: tubular, unlike a round cyst
    img = _paint(img, np.clip(1 - np.abs(_Y - 112 - 0.004 * (_X - 64) ** 2) / 3, 0, 1), 0.9)  # diaphragm
    return img * _us_field()


def _us_breast(rng: np.random.Generator) -> np.ndarray:
    wave = _smooth_noise(rng, 4, 6.0)
    img = np.where(_Y < 14, 0.8, np.where(_Y < 44 + wave, 0.3, np.where(_Y < 96 + wave, 0.58, 0.4)))
    img = img.astype(np.float32) + 0.08 * np.sin(_Y / 2.5) * (_Y > 96 + wave)  # pectoral muscle fibres
    return img * _us_field()


def _fundus(rng: np.random.Generator) -> np.ndarray:
    field = _disc(64, 64, 60, 60, 1)
    shade = np.clip(1.15 - 0.45 * (((_X - 64) ** 2 + (_Y - 64) ** 2) / 60**2), 0, 1.2)
    img = np.stack([0.85 * shade, 0.36 * shade, 0.14 * shade], -1) + _smooth_noise(rng, 6, 0.03)[..., None]
    disc_x = 94.0 if rng.random() < 0.5 else 34.0  # right or left eye
    away = -1.0 if disc_x > 64 else 1.0
    vessels = []
    for k, bend in enumerate((-1, -0.5, 0.5, 1)):
        spread = float(rng.uniform(18, 30))
        pts = [(disc_x + away * t * 62, 64 + bend * spread * math.sin(t * 2.2) + k) for t in np.linspace(0, 1, 12)]
        vessels.append([(float(x), float(y)) for x, y in pts])
    vmask = _blur(_lines(vessels, 2), 0.6)
    img = img * (1 - vmask[..., None]) + np.array([0.45, 0.06, 0.05]) * vmask[..., None]
    macula = _disc(64 - away * 4, 66, 9, 9, 6)[..., None]
    img = img * (1 - 0.35 * macula)
    opt = _disc(disc_x, 64, 9, 10, 2)[..., None]
    img = img * (1 - opt) + np.array([0.98, 0.86, 0.55]) * opt
    return img * field[..., None]


def _dermoscopy(rng: np.random.Generator) -> np.ndarray:
    tone = np.array([0.86, 0.66, 0.56]) + rng.uniform(-0.05, 0.05, 3)
    img = tone * (1 + _smooth_noise(rng, 10, 0.03))[..., None]
    hairs = []
    for _ in range(int(rng.integers(1, 4))):
        x0, y0, a = rng.uniform(0, SIZE), rng.uniform(0, SIZE), rng.uniform(0, math.pi)
        hairs.append([(float(x0 + t * math.cos(a)), float(y0 + t * math.sin(a) + 0.004 * t * t))
                      for t in range(-70, 71, 10)])
    hmask = _lines(hairs, 1)[..., None]
    img = img * (1 - 0.7 * hmask)
    return img * _disc(64, 64, 63, 63, 6)[..., None]  # dark rim of the dermatoscope field


_BACKGROUNDS = {
    ("X-ray", "chest"): _xray_chest,
    ("X-ray", "knee"): _xray_knee,
    ("CT", "brain"): _ct_brain,
    ("CT", "chest"): _ct_chest,
    ("CT", "abdomen"): _ct_abdomen,
    ("MRI", "brain"): _mri_brain,
    ("MRI", "knee"): _mri_knee,
    ("MRI", "breast"): _mri_breast,
    ("ultrasound", "abdomen"): _us_abdomen,
    ("ultrasound", "breast"): _us_breast,
    ("fundus photography", "retina"): _fundus,
    ("dermoscopy", "skin"): _dermoscopy,
}


# --- lesions ------------------------------------------------------------------------------------------------


def _lesion_layers(lesion: Lesion, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(extent mask, signed intensity change) of one lesion; the change is zero outside the mask."""
    x, y, r, c = lesion.cx, lesion.cy, lesion.radius, lesion.contrast
    if lesion.kind in ("nodule", "cyst"):
        mask = _disc(x, y, r, r, 0.8)
        return mask, mask * (c if lesion.kind == "nodule" else -c)
    if lesion.kind == "mass":
        theta = np.arctan2(_Y - y, _X - x)
        k1, k2 = rng.integers(3, 6, size=2)
        p1, p2 = rng.uniform(0, 2 * math.pi, size=2)
        lobes = 1.5 if lesion.bold else 1.0  # bold: deep lobules and a coarse inner texture, unlike a nodule
        rad = r * (1 + lobes * (0.2 * np.sin(k1 * theta + p1) + 0.1 * np.sin(k2 * theta + p2)))
        d = np.sqrt((_X - x) ** 2 + (_Y - y) ** 2) / rad
        mask = np.clip((1 - d) * r / 1.6 + 0.5, 0, 1)
        texture = 0.7 + 0.3 * np.sign(np.sin(_X / 1.6) * np.sin(_Y / 1.6)) if lesion.bold else 1.0
        return mask, mask * c * texture
    if lesion.kind == "abscess":
        outer, inner = _disc(x, y, r, r, 0.8), _disc(x, y, 0.55 * r, 0.55 * r, 0.8)
        return outer, (outer - inner) * c - inner * c
    # calcification: a cluster of tiny, very bright dots inside the lesion radius
    mask = np.zeros((SIZE, SIZE), np.float32)
    dot = 2.2 if lesion.bold else max(1.3, 0.2 * r)
    if lesion.bold:  # a ring of dots round one at the centre, so the cluster fills the lesion's extent
        n = int(rng.integers(5, 8))
        spots = [(0.0, 0.0)] + [(0.8 * (r - dot), 2 * math.pi * (k + rng.uniform(-0.2, 0.2)) / n) for k in range(n)]
    else:
        spots = [(0.75 * (r - dot) * math.sqrt(rng.random()), rng.uniform(0, 2 * math.pi))
                 for _ in range(int(rng.integers(4, 8)))]
    for rho, phi in spots:
        mask = np.maximum(mask, _disc(x + rho * math.cos(phi), y + rho * math.sin(phi), dot, dot, 0.6))
    return mask, mask * 1.6 * c


def _box(mask: np.ndarray) -> list[float]:
    """Tight ``[x1, y1, x2, y2]`` (pixel edges) around the drawn part of a lesion."""
    ys, xs = np.nonzero(mask > 0.5)
    return [float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1)]


def _noise(modality: str, img: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Acquisition noise in the style of each modality (speckle for ultrasound, Rician-like for MRI)."""
    if modality == "ultrasound":
        speckle = _blur(rng.rayleigh(0.8, (SIZE, SIZE)).astype(np.float32), 0.7)
        return img * speckle
    if modality == "MRI":
        return np.sqrt((img + rng.normal(0, 0.03, img.shape)) ** 2 + rng.normal(0, 0.03, img.shape) ** 2)
    sigma = {"X-ray": 0.02, "CT": 0.025, "fundus photography": 0.015, "dermoscopy": 0.012}[modality]
    return img + rng.normal(0, sigma, img.shape)


def _vary(img: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Patient and acquisition variety: a shift of up to 4 px (edges replicated), a random gamma and gain
    (with a slight colour cast on colour images), so that no two normal backgrounds are pixel-identical."""
    dy, dx = rng.integers(-4, 5, size=2)
    pad = [(4, 4), (4, 4)] + [(0, 0)] * (img.ndim - 2)
    img = np.pad(img, pad, mode="edge")[4 - dy:4 - dy + SIZE, 4 - dx:4 - dx + SIZE]
    gain = rng.uniform(0.9, 1.1) * (rng.uniform(0.96, 1.04, 3) if img.ndim == 3 else 1.0)
    return (np.clip(img, 0, 1) ** rng.uniform(0.85, 1.15) * gain).astype(np.float32)


def draw(scene: Scene) -> tuple[Image.Image, list[list[float]]]:
    """Render ``scene``: the image (``L`` for grey modalities, ``RGB`` for colour) and one box per lesion.

    A lesion shifts the local intensity by its ``contrast`` (both ways for an abscess); on colour images
    brighter means paler/yellower and darker means browner, as in fundus exudates and pigmented skin lesions.
    """
    bg_rng, noise_rng = (np.random.default_rng([scene.seed, stream]) for stream in (0, 1))
    img = _vary(_BACKGROUNDS[(scene.modality, scene.anatomy)](bg_rng).astype(np.float32), bg_rng)
    boxes = []
    for i, lesion in enumerate(scene.lesions):
        mask, change = _lesion_layers(lesion, np.random.default_rng([scene.seed, 2 + i]))
        if img.ndim == 3:
            up = np.array([0.7, 0.75, 0.6], np.float32)  # towards pale yellow
            down = np.array([0.45, 0.6, 0.55], np.float32)  # towards brown
            img = img + np.where(change[..., None] > 0, change[..., None] * up, change[..., None] * down)
        else:
            img = img + change
        boxes.append(_box(mask))
    img = np.clip(_noise(scene.modality, img, noise_rng), 0.0, 1.0)
    pixels = np.round(img * 255).astype(np.uint8)
    return Image.fromarray(pixels), boxes
