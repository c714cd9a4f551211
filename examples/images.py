"""Example pipeline ``images``: a small CNN on JPEG images decoded and augmented per sample (data-bound).

Bottleneck: **data loading**. Every sample is a real JPEG that ``__getitem__`` decodes with PIL, then
random-resized-crops to 64x64, maybe flips, and turns into a normalised float tensor: about 1-3 ms of
CPU per sample, as with an image folder on disk minus the disk. The CNN costs less than that per
sample, so with ``num_workers=0`` the training process spends most of each step waiting for the
next batch, and DataLoader workers (plus the thread count that leaves the model) are what matter.

Nothing is downloaded: at construction a few distinct synthetic pictures (smooth colour fields with
shapes and grain, tinted by their label) are rendered from a seeded generator and encoded as JPEG
bytes in memory; sample ``i`` decodes picture ``i % distinct`` with an augmentation drawn from a
generator seeded with ``seed + i``, so the dataset is deterministic.
"""

from __future__ import annotations

import io

import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFilter
from torch.utils.data import Dataset

_MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
_STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


def render_picture(label: int, size: int, rng: np.random.Generator) -> Image.Image:
    """A synthetic photo-like RGB picture: a blurred colour field tinted by ``label``, shapes and grain."""
    coarse = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
    field = Image.fromarray(coarse).resize((size, size), Image.Resampling.BICUBIC)
    tint = np.array([label % 3, (label // 3) % 3, label % 2], dtype=np.float32) * 40
    pixels = np.asarray(field, dtype=np.float32) * 0.7 + tint
    picture = Image.fromarray(pixels.clip(0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(picture)
    for _ in range(6):
        x0, y0 = rng.integers(0, size - 8, 2)
        w, h = rng.integers(size // 8, size // 2, 2)
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        box = (int(x0), int(y0), int(x0 + w), int(y0 + h))
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)(box, fill=colour)
    picture = picture.filter(ImageFilter.GaussianBlur(1.0))
    grain = rng.normal(0, 12, (size, size, 3))
    return Image.fromarray((np.asarray(picture, dtype=np.float32) + grain).clip(0, 255).astype(np.uint8))


class JpegImages(Dataset):
    """Map-style dataset of in-memory JPEGs, decoded and augmented on every access.

    ``distinct`` pictures of ``source_size`` pixels square are rendered and JPEG-encoded once;
    ``__getitem__`` decodes one, random-resized-crops it to ``image_size`` (PIL resize), flips it
    half the time and returns a normalised (3, image_size, image_size) float32 tensor and its label.
    """

    def __init__(
        self,
        length: int = 8192,
        distinct: int = 16,
        source_size: int = 448,
        image_size: int = 64,
        num_classes: int = 10,
        quality: int = 90,
        seed: int = 0,
    ):
        self.length = length
        self.image_size = image_size
        self.num_classes = num_classes
        self.seed = seed
        rng = np.random.default_rng(seed)
        self.labels = [int(label) for label in rng.integers(0, num_classes, distinct)]
        self.jpegs: list[bytes] = []
        for label in self.labels:
            buffer = io.BytesIO()
            render_picture(label, source_size, rng).save(buffer, format="JPEG", quality=quality)
            self.jpegs.append(buffer.getvalue())

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not 0 <= index < self.length:
            raise IndexError(f"index {index} out of range for dataset of length {self.length}")
        which = index % len(self.jpegs)
        rng = np.random.default_rng(self.seed + index)
        with Image.open(io.BytesIO(self.jpegs[which])) as jpeg:
            picture = jpeg.convert("RGB")
        picture = self._random_resized_crop(picture, rng)
        if rng.random() < 0.5:
            picture = picture.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        pixels = np.asarray(picture, dtype=np.float32) / 255.0
        pixels = (pixels - _MEAN) / _STD
        image = torch.from_numpy(np.ascontiguousarray(pixels.transpose(2, 0, 1)))
        return image, torch.tensor(self.labels[which], dtype=torch.int64)

    def _random_resized_crop(self, picture: Image.Image, rng: np.random.Generator) -> Image.Image:
        """torchvision's RandomResizedCrop: 8-100 % of the area, aspect ratio 3/4 to 4/3, then resize."""
        width, height = picture.size
        area = width * height * rng.uniform(0.08, 1.0)
        ratio = float(np.exp(rng.uniform(np.log(3 / 4), np.log(4 / 3))))
        w = min(width, max(1, round(float(np.sqrt(area * ratio)))))
        h = min(height, max(1, round(float(np.sqrt(area / ratio)))))
        left = int(rng.integers(0, width - w + 1))
        top = int(rng.integers(0, height - h + 1))
        size = (self.image_size, self.image_size)
        return picture.resize(size, Image.Resampling.BILINEAR, box=(left, top, left + w, top + h))
