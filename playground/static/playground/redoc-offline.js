// Redoc's sidebar credits Redocly with a logo it loads from cdn.redoc.ly, and no Redoc
// setting turns that off. The docs load nothing from outside this site (UI-4, UI-7): the
// logo's address is swapped for this site's icon before the browser can ask for it, both
// where Redoc sets it as an attribute and as a property (the page's
// Content-Security-Policy refuses any other outside address).
(function () {
  "use strict";
  var local = document.currentScript.dataset.logo;
  function here(value) {
    return String(value).indexOf("https://cdn.redoc.ly/") === 0 ? local : value;
  }
  var setAttribute = Element.prototype.setAttribute;
  Element.prototype.setAttribute = function (name, value) {
    return setAttribute.call(this, name, name === "src" ? here(value) : value);
  };
  var src = Object.getOwnPropertyDescriptor(HTMLImageElement.prototype, "src");
  Object.defineProperty(HTMLImageElement.prototype, "src", {
    configurable: true,
    enumerable: src.enumerable,
    get: src.get,
    set: function (value) { src.set.call(this, here(value)); }
  });
})();
